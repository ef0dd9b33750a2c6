"""Who executes a queued run: RQ workers (``rq_queue``) or threads of this process (``local``).

Both stand behind one interface (``base.Executor``) and end in ``jobs.execute_run``, i.e.
``AgentRuntime.run_queued``: the identical claim path, so a run cancelled before its executor
gets to it never executes, wherever it was queued. ``NRLLM_AGENTS["EXECUTOR"]`` chooses:
``"auto"`` (the default) is RQ when ``REDIS_URL`` is set and the in-process threads otherwise.
"""

from __future__ import annotations

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from ..conf import app_settings
from .base import CLAIM_RETRY_DELAYS, Executor, QueueUnavailable
from .local import LOCAL
from .rq_queue import RQ

__all__ = ["CHOICES", "CLAIM_RETRY_DELAYS", "LOCAL", "RQ", "Executor", "QueueUnavailable", "chosen"]

CHOICES = ("auto", RQ.name, LOCAL.name)


def chosen() -> Executor:
    """The executor ``NRLLM_AGENTS["EXECUTOR"]`` names, ``"auto"`` resolved by ``REDIS_URL``.

    Read at every call, so a test's settings override takes effect. Raises
    ``ImproperlyConfigured`` for any other value (``manage.py check`` names it first).
    """
    value = app_settings.EXECUTOR
    if value == "auto":
        return RQ if getattr(settings, "REDIS_URL", None) else LOCAL
    for executor in (RQ, LOCAL):
        if value == executor.name:
            return executor
    raise ImproperlyConfigured(
        f"NRLLM_AGENTS['EXECUTOR'] must be one of {', '.join(map(repr, CHOICES))}, not {str(value)[:40]!r}"
    )
