"""Who executes a queued run: RQ workers (``rq_queue``) or threads of this process (``local``).

Both stand behind one interface (``base.Executor``) and end in ``jobs.execute_run``, i.e.
``AgentRuntime.run_queued``: the identical claim path, so a run cancelled before its executor
gets to it never executes, wherever it was queued. ``NRLLM_AGENTS["EXECUTOR"]`` chooses, as
Django's ``TASKS["BACKEND"]`` does, by the dotted path of an ``Executor`` class; ``"rq"`` and
``"local"`` are aliases of the two built in, and ``"auto"`` (the default) is RQ when
``REDIS_URL`` is set and the in-process threads otherwise.
"""

from __future__ import annotations

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import import_string

from ..conf import app_settings
from .base import CLAIM_RETRY_DELAYS, Executor, QueueUnavailable
from .local import LOCAL
from .rq_queue import RQ

__all__ = ["ALIASES", "CLAIM_RETRY_DELAYS", "LOCAL", "RQ", "Executor", "QueueUnavailable", "chosen", "named"]

# the words NRLLM_AGENTS["EXECUTOR"] takes besides a dotted path ("auto" is resolved in chosen())
ALIASES = {
    RQ.name: f"{type(RQ).__module__}.{type(RQ).__qualname__}",
    LOCAL.name: f"{type(LOCAL).__module__}.{type(LOCAL).__qualname__}",
}
_built: dict[str, Executor] = {ALIASES[RQ.name]: RQ, ALIASES[LOCAL.name]: LOCAL}


def named(value: str) -> Executor:
    """The process's one instance of the executor ``value`` names: an alias or a dotted path.

    Raises ``ImproperlyConfigured`` when the path does not import or names no ``Executor``.
    """
    path = ALIASES.get(value, value)
    if path not in _built:
        try:
            cls = import_string(path)
        except ImportError:
            raise ImproperlyConfigured(
                f"NRLLM_AGENTS['EXECUTOR'] must be 'auto', {', '.join(map(repr, ALIASES))} or the dotted path of "
                f"an Executor class, not {str(value)[:60]!r}"
            ) from None
        if not isinstance(cls, type) or not all(
            callable(getattr(cls, m, None)) for m in ("submit", "holds", "wait_idle")
        ):
            raise ImproperlyConfigured(f"NRLLM_AGENTS['EXECUTOR'] {path!r} is not an Executor class (base.Executor)")
        _built[path] = cls()
    return _built[path]


def chosen() -> Executor:
    """The executor ``NRLLM_AGENTS["EXECUTOR"]`` names, ``"auto"`` resolved by ``REDIS_URL``.

    Read at every call, so a test's settings override takes effect. Raises
    ``ImproperlyConfigured`` for a value that names no executor (``manage.py check`` names it first).
    """
    value = app_settings.EXECUTOR
    if value == "auto":
        return RQ if getattr(settings, "REDIS_URL", None) else LOCAL
    return named(str(value))
