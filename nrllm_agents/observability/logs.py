"""Structured logs: one configuration, JSON (``NRLLM_LOG_FORMAT=json``) or readable text.

Every record about a run carries ``run_id``, ``segment`` (the executing segment's identity),
``sequence`` (the last recorded step, where known) and ``event`` (``claim``, ``boundary``,
``cancel``, ``acknowledge``, ``settle``, ``reap``, ...). Records logged by ``run_event`` carry
them explicitly; any other record logged while a segment executes (a store warning, a tool's
own logging) gets them from ``RunContextFilter``, which reads the segment bound to the
current context by ``bind_segment``. Imports no Django: settings import it.
"""

from __future__ import annotations

import contextvars
import logging
import uuid
from typing import Any

RUN_LOGGER = logging.getLogger("nrllm_agents.runs")
RUN_FIELDS = ("run_id", "segment", "sequence", "event")

_segment: contextvars.ContextVar[Any] = contextvars.ContextVar("nrllm_segment", default=None)


def bind_segment(trace: Any) -> contextvars.Token[Any]:
    """Make ``trace`` (with ``run_id``, ``owner``, ``last_sequence``) the current segment."""
    return _segment.set(trace)


def unbind_segment(token: contextvars.Token[Any]) -> None:
    _segment.reset(token)


class RunContextFilter(logging.Filter):
    """Adds the current segment's ``run_id``, ``segment`` and ``sequence`` to records lacking them."""

    def filter(self, record: logging.LogRecord) -> bool:
        trace = _segment.get()
        if trace is not None and getattr(record, "run_id", None) is None:
            record.run_id = str(trace.run_id)
            record.segment = trace.owner
            if getattr(record, "sequence", None) is None:
                record.sequence = trace.last_sequence
        return True


class OneLineFilter(logging.Filter):
    """A library's record of what a peer sent (the ``mcp`` SDK's "Failed to parse JSONRPC
    message"): one line, its exception's class in place of the traceback. The traceback is
    the library's, not ours, and quotes what the server sent (any size, any bytes); the run
    already has the tool error that says what went wrong."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and record.exc_info[1] is not None:
            record.msg = f"{record.getMessage()} ({type(record.exc_info[1]).__name__})"
            record.args = ()
            record.exc_info = None
            record.exc_text = None
        return True


class TextFormatter(logging.Formatter):
    """``time level logger message`` then ``key=value`` for the run fields a record has."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        pairs = [f"{k}={getattr(record, k)}" for k in RUN_FIELDS if getattr(record, k, None) is not None]
        if not pairs:
            return text
        head, sep, tail = text.partition("\n")  # keep a traceback below the fields
        return f"{head} [{' '.join(pairs)}]{sep}{tail}"


def run_event(
    event: str,
    run_id: uuid.UUID | str,
    message: str,
    *args: Any,
    level: int = logging.INFO,
    segment: str | None = None,
    sequence: int | None = None,
    **fields: Any,
) -> None:
    """Log one event about a run with its fields (cheap when the level is disabled)."""
    if not RUN_LOGGER.isEnabledFor(level):
        return
    extra: dict[str, Any] = {"event": event, "run_id": str(run_id), **fields}
    if segment:
        extra["segment"] = segment
    if sequence is not None:
        extra["sequence"] = sequence
    RUN_LOGGER.log(level, "run %s: " + message, run_id, *args, extra=extra)


QUIET_LOGGERS = ("httpx", "httpx2", "httpcore", "httpcore2", "openai", "anthropic", "google_genai", "urllib3")


def logging_config(fmt: str = "text", level: str = "WARNING") -> dict[str, Any]:
    """The ``LOGGING`` setting: the ``nrllm_agents`` loggers to stderr, JSON or text, at ``level``;
    and Django's request errors (a 500's traceback, ``django.request``) and security refusals
    (``django.security``) to the same stderr in the same format, debug or not (Django's own
    configuration prints them only with ``DEBUG`` on); and the ``mcp`` SDK's warnings."""
    formatter = "json" if fmt.strip().lower() == "json" else "text"
    handler = {"handlers": ["console"], "level": level.upper(), "propagate": False}
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "filters": {
            "run_context": {"()": "nrllm_agents.observability.logs.RunContextFilter"},
            "one_line": {"()": "nrllm_agents.observability.logs.OneLineFilter"},
        },
        "formatters": {
            "text": {"()": "nrllm_agents.observability.logs.TextFormatter"},
            "json": {
                "()": "pythonjsonlogger.json.JsonFormatter",
                "fmt": "%(asctime)s %(levelname)s %(name)s %(message)s %(process)d",
                "rename_fields": {"asctime": "time", "levelname": "level", "name": "logger"},
            },
        },
        "handlers": {
            "console": {"class": "logging.StreamHandler", "formatter": formatter, "filters": ["run_context"]},
            "console_one_line": {
                "class": "logging.StreamHandler",
                "formatter": formatter,
                "filters": ["run_context", "one_line"],
            },
        },
        "loggers": {
            "nrllm_agents": handler,
            # The mcp SDK's own warnings (a line that is not JSON-RPC, a broken stream): into the
            # same log, one line each, never to stderr by logging's last-resort handler.
            "mcp": {"handlers": ["console_one_line"], "level": "WARNING", "propagate": False},
            "django.request": {"handlers": ["console"], "level": "ERROR", "propagate": False},
            "django.security": {"handlers": ["console"], "level": "ERROR", "propagate": False},
            # The vendor SDKs and their HTTP stack log each request's URL (a connection's host,
            # port and query) at DEBUG and INFO: only their warnings and errors pass.
            **{name: {"level": "WARNING"} for name in QUIET_LOGGERS},
        },
    }
