"""Connections: add, list, remove and re-encrypt them, for every surface alike.

A connection's key is write-only: ``public_dict`` (what lists, the API and ``--json`` show)
says whether a key is set, never the key, and errors name the field, never its value. The
userinfo of its URL (``user:password@``) is encrypted at rest like the key and shown masked
(``shown_url``); a URL given back with its userinfo masked keeps the stored one (``given_url``).
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction

from ..crypto.vault import rotate as rotate_token
from ..models import Connection, split_userinfo, with_userinfo

KEY_FIELD = "api_key"
MASK = "***"


def shown_url(row: Connection) -> str:
    """``row``'s URL as staff see it: its userinfo (``user:password@``) masked, ``http://***@host/v1``."""
    return with_userinfo(row.base_url, MASK) if row.has_userinfo else row.base_url


def given_url(row: Connection | None, url: str) -> str:
    """The URL to store for ``url`` typed on a surface: the stored userinfo when ``url`` gives it
    back masked (``***@``) and ``row`` has one, otherwise ``url`` as typed."""
    bare, userinfo = split_userinfo(url)
    if userinfo == MASK and row is not None and row.has_userinfo and bare == row.base_url:
        return row.url()
    return url


class InvalidConnection(ValueError):
    """A connection could not be saved; ``errors`` maps each field to what is wrong with it."""

    def __init__(self, errors: dict[str, str]) -> None:
        self.errors = errors
        super().__init__("; ".join(f"{k}: {v}" for k, v in errors.items()))


def save(
    name: str,
    *,
    kind: str,
    base_url: str,
    default_model: str = "",
    api_key: str | None = None,
    replace: bool = False,
    keep_key: bool = False,
) -> tuple[Connection, bool]:
    """Create (or, with ``replace``, change) the connection ``name``; ``(row, created)``.

    ``api_key`` ``None`` or blank stores no key, unless ``keep_key`` keeps the stored one.
    Raises ``InvalidConnection``.
    """
    row = Connection.objects.filter(name=name).first()
    created = row is None
    if row is not None and not replace:
        raise InvalidConnection({"name": f"a connection named {name!r} exists; remove it first, or replace it"})
    base_url = given_url(row, base_url)
    row = row or Connection(name=name)
    row.kind, row.base_url, row.default_model = kind, base_url, default_model or ""
    if api_key is not None and ("\x00" in api_key or len(api_key) > 4000):
        raise InvalidConnection({KEY_FIELD: "at most 4000 characters, no NUL"})
    try:
        row.full_clean(exclude=["name"] if not created else None)
    except ValidationError as exc:
        raise InvalidConnection({field: " ".join(messages) for field, messages in exc.message_dict.items()}) from None
    if not (keep_key and api_key is None):
        row.set_key(api_key.strip() if api_key else None)
    row.set_url(base_url)
    row.save()
    return row, created


def public_dict(row: Connection) -> dict[str, Any]:
    """What may be shown of a connection (to staff): everything but its key, and its URL's userinfo."""
    return {
        "name": row.name,
        "kind": row.kind,
        "base_url": shown_url(row),
        "default_model": row.default_model,
        "has_key": row.has_key,
        "updated_at": row.updated_at.isoformat() if row.updated_at else None,
    }


def remove(name: str) -> bool:
    """Delete the connection ``name`` (its prices go with it); ``False`` when there is none."""
    deleted, _ = Connection.objects.filter(name=name).delete()
    return bool(deleted)


def rotate() -> int:
    """Re-encrypt every stored key (and URL userinfo) with the first of ``SECRET_KEYS``; the number
    of connections re-encrypted.

    All in one transaction: a key that no configured key opens (``vault.VaultError``) changes
    nothing.
    """
    count = 0
    with transaction.atomic():
        for row in Connection.objects.select_for_update().exclude(encrypted_key="", encrypted_userinfo=""):
            row.encrypted_key = rotate_token(row.encrypted_key) if row.encrypted_key else ""
            row.encrypted_userinfo = rotate_token(row.encrypted_userinfo) if row.encrypted_userinfo else ""
            row.save(update_fields=["encrypted_key", "encrypted_userinfo", "updated_at"])
            count += 1
    return count
