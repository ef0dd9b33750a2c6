"""Settings of nrllm_agents, read lazily from ``settings.NRLLM_AGENTS`` with typed defaults."""

from __future__ import annotations

import os
from typing import Any

from django.conf import settings as django_settings

DEFAULTS: dict[str, Any] = {
    # name -> dotted path of a factory ``(request, run_id) -> Provider``
    "PROVIDERS": {
        "scripted": "nrllm_agents.registry.scripted_provider",
        "openai": "nrllm_agents.registry.openai_provider",
    },
    # name -> dotted path of a factory ``(run_id) -> Tool``
    "TOOLS": {
        "calculator": "nrllm_agents.registry.calculator_tool",
        "current_time": "nrllm_agents.registry.current_time_tool",
        "sleep": "nrllm_agents.registry.sleep_tool",
        "write_note": "nrllm_agents.tools.WriteNote",
    },
    "DEFAULT_PROVIDER": "scripted",
    "DEFAULT_TOOLS": ["calculator", "current_time", "sleep"],
    "DEFAULT_MAX_ITERATIONS": 10,
    "MAX_ITERATIONS_LIMIT": 100,
    "SLEEP_MAX_SECONDS": 30.0,
    "OPENAI_TIMEOUT": 60.0,
    # stream model answers (live text, and a cancel keeps what arrived); off: one response,
    # and a cancel still aborts the call by closing its connection
    "OPENAI_STREAM": os.environ.get("NRLLM_OPENAI_STREAM", "1").strip().lower() not in {"0", "false", "no", "off"},
    "QUEUE_NAME": "default",
    # threads of the in-process executor used when REDIS_URL is unset
    "LOCAL_WORKERS": 4,
    # RQ's default 180 s job timeout would kill long runs; -1 means no timeout.
    "JOB_TIMEOUT": int(os.environ.get("NRLLM_JOB_TIMEOUT", "3600")),
    # how long a segment owns a run without renewing; renewed at every step boundary, so it
    # must exceed the longest single step (a model call's timeout, the longest tool)
    "LEASE_SECONDS": float(os.environ.get("NRLLM_LEASE_SECONDS", "300")),
    # requeues a run may take (transient provider failures and reaped workers share it)
    "MAX_ATTEMPTS": int(os.environ.get("NRLLM_MAX_ATTEMPTS", "3")),
    # retry delay: RETRY_BASE_SECONDS * 2**attempt, capped at RETRY_MAX_SECONDS
    "RETRY_BASE_SECONDS": float(os.environ.get("NRLLM_RETRY_BASE_SECONDS", "2")),
    "RETRY_MAX_SECONDS": float(os.environ.get("NRLLM_RETRY_MAX_SECONDS", "300")),
    # the browser stream (GET /api/runs/<id>/stream/): how often it reads the stored stream,
    # how long it may stay silent before a keepalive comment, and when it closes so the
    # client reconnects with Last-Event-ID (bounds how long one stream holds a worker thread)
    "STREAM_POLL_SECONDS": float(os.environ.get("NRLLM_STREAM_POLL_SECONDS", "0.2")),
    "STREAM_HEARTBEAT_SECONDS": float(os.environ.get("NRLLM_STREAM_HEARTBEAT_SECONDS", "10")),
    "STREAM_MAX_SECONDS": float(os.environ.get("NRLLM_STREAM_MAX_SECONDS", "300")),
    # on PostgreSQL, wake watchers by LISTEN/NOTIFY instead of polling (off: poll as on SQLite)
    "STREAM_PUSH": os.environ.get("NRLLM_STREAM_PUSH", "1").strip().lower() not in {"0", "false", "no", "off"},
    # open streams allowed per user and per process (0: unlimited); past them a new one gets 429
    "STREAM_MAX_PER_USER": int(os.environ.get("NRLLM_STREAM_MAX_PER_USER", "20")),
    "STREAM_MAX_OPEN": int(os.environ.get("NRLLM_STREAM_MAX_OPEN", "1000")),
    # the model's words as they stream: pieces arriving within this window go out together
    "DELTA_COALESCE_SECONDS": float(os.environ.get("NRLLM_DELTA_COALESCE_SECONDS", "0.05")),
    # how often a process re-reads the status of the runs it executes, in one query, when no
    # cancel notification can reach it (SQLite; a PostgreSQL listening connection that is lost)
    "CANCEL_POLL_SECONDS": float(os.environ.get("NRLLM_CANCEL_POLL_SECONDS", "1")),
}


class _Settings:
    """Attribute access to the merged settings; nothing is read before first use."""

    def __getattr__(self, name: str) -> Any:
        if name not in DEFAULTS:
            raise AttributeError(name)
        user = getattr(django_settings, "NRLLM_AGENTS", {}) or {}
        value = user.get(name, DEFAULTS[name])
        if name in ("PROVIDERS", "TOOLS"):
            value = {**DEFAULTS[name], **value}
        return value


app_settings = _Settings()
