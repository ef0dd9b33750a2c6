"""Secrets at rest: the API keys of connections, encrypted with ``cryptography``'s MultiFernet.

Keys come from ``NRLLM_AGENTS["SECRET_KEYS"]`` (or ``NRLLM_SECRET_KEYS``): Fernet keys, the
first one encrypts and every one decrypts, so a key is rotated by putting a new one first and
running ``manage.py agent_connections rotate`` (every stored key re-encrypted with the first),
after which the old one can go. With no key set, development (``DEBUG``) derives one from
``SECRET_KEY``; production refuses (a system check error, and ``VaultError`` here). Nothing in
this module ever puts a secret, or a part of one, in a message.
"""

from __future__ import annotations

import base64

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from django.conf import settings

from ..conf import app_settings

NEW_KEY_HINT = 'python -c "from cryptography.fernet import Fernet; print(Fernet.generate_key().decode())"'


class VaultError(RuntimeError):
    """A key cannot be encrypted or decrypted (no encryption key configured, or a wrong one)."""


def configured_keys() -> list[str]:
    """The configured encryption keys, in order (empty when none is set)."""
    value = app_settings.SECRET_KEYS
    if isinstance(value, str):
        value = value.split(",")
    return [str(k).strip() for k in value or () if str(k).strip()]


def problem() -> str | None:
    """What is wrong with the key setting, for the system check; ``None`` when it is usable."""
    keys = configured_keys()
    for position, key in enumerate(keys, 1):
        try:
            Fernet(key)
        except (ValueError, TypeError):
            return f"NRLLM_AGENTS['SECRET_KEYS'] key #{position} is not a Fernet key (generate one: {NEW_KEY_HINT})"
    if not keys and not settings.DEBUG:
        return (
            "NRLLM_AGENTS['SECRET_KEYS'] (or NRLLM_SECRET_KEYS) is not set: connections' API keys cannot be "
            f"encrypted. Set it to a Fernet key (generate one: {NEW_KEY_HINT})"
        )
    return None


def _development_key() -> bytes:
    """A Fernet key derived from ``SECRET_KEY`` (HKDF-SHA256); development only."""
    derived = HKDF(algorithm=hashes.SHA256(), length=32, salt=b"nrllm_agents.crypto.vault", info=b"connections").derive(
        settings.SECRET_KEY.encode()
    )
    return base64.urlsafe_b64encode(derived)


def _box() -> MultiFernet:
    found = problem()
    if found is not None:
        raise VaultError(found)
    keys = configured_keys()
    return MultiFernet([Fernet(k) for k in keys] if keys else [Fernet(_development_key())])


def encrypt(secret: str) -> str:
    """The secret encrypted with the first key (a Fernet token, ASCII)."""
    return _box().encrypt(secret.encode()).decode("ascii")


def decrypt(token: str) -> str:
    """The secret back; ``VaultError`` when no configured key opens it."""
    try:
        return _box().decrypt(token.encode("ascii")).decode()
    except (InvalidToken, UnicodeError):
        raise VaultError("a stored API key cannot be decrypted with the configured SECRET_KEYS") from None


def rotate(token: str) -> str:
    """The token re-encrypted with the first key (its secret unchanged); ``VaultError`` as above."""
    try:
        return _box().rotate(token.encode("ascii")).decode("ascii")
    except (InvalidToken, UnicodeError):
        raise VaultError("a stored API key cannot be decrypted with the configured SECRET_KEYS") from None
