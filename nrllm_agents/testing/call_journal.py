"""The call journal: a test instrument recording when each model call and tool call starts.

Tests and benchmarks use it to prove that nothing started after a cancellation boundary,
across processes (a worker, a CLI child). It is enabled by the ``NRLLM_CALL_JOURNAL``
environment variable (a file path) and lives here, not in the product classes: when it is
enabled, ``catalog.registry`` wraps every provider and tool it builds (from settings, from a
connection, from an MCP server) in a recording proxy; when it is not, the run gets the bare
object and nothing is recorded.

A proxy records the start right before the call it wraps: after the loop decided to make the
call (its gate, the write fence), before any of the provider's or tool's own work. It takes a
``context`` exactly when the object it wraps does, so the loop treats it like that object.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Sequence
from typing import Any

from ..domain.cancel import CallContext
from ..domain.loop import accepts_context
from ..domain.providers import Provider
from ..domain.steps import ModelResponse
from ..domain.tools import Tool

VARIABLE = "NRLLM_CALL_JOURNAL"


def enabled() -> bool:
    """Whether this process journals its calls (``NRLLM_CALL_JOURNAL`` names a file)."""
    return bool(os.environ.get(VARIABLE))


class CallJournal:
    """Appends one JSON line per model call or tool start to a file, across processes.

    The file is ``path``, else the one ``NRLLM_CALL_JOURNAL`` names; with neither, ``record``
    does nothing. Given a ``run_id``, each line carries it, so runs sharing a process stay apart.
    """

    _lock = threading.Lock()

    def __init__(self, path: str | None = None, *, run_id: object = None) -> None:
        self.path = path if path is not None else os.environ.get(VARIABLE) or None
        self.run_id = None if run_id is None else str(run_id)

    def record(self, what: str, name: str) -> None:
        """Append ``{"what", "name", "t", "pid"[, "run_id"]}``: ``what`` is ``model`` or ``tool``."""
        if not self.path:
            return
        entry = {"what": what, "name": name, "t": time.time(), "pid": os.getpid()}
        if self.run_id is not None:
            entry["run_id"] = self.run_id
        line = json.dumps(entry)
        with self._lock, open(self.path, "a", encoding="utf-8") as fh:
            fh.write(line + "\n")


class RecordingProvider:
    """A provider that journals each model call's start, then makes it with the one it wraps.

    Any other attribute (``calls``, ``base_url``, ...) is the wrapped provider's.
    """

    def __init__(self, provider: Provider, journal: CallJournal) -> None:
        self.wrapped = provider
        self.journal = journal
        self.name = provider.name
        self.model = provider.model

    def __getattr__(self, name: str) -> Any:
        if name == "wrapped":  # not set yet (a copy being made): no recursion
            raise AttributeError(name)
        return getattr(self.wrapped, name)

    def __repr__(self) -> str:
        return f"RecordingProvider({self.wrapped!r})"

    def complete(self, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]]) -> ModelResponse:
        self.journal.record("model", self.model)
        return self.wrapped.complete(messages, tools)


class RecordingContextProvider(RecordingProvider):
    """A ``RecordingProvider`` of a provider that takes a ``context``."""

    def complete(
        self, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]], context: CallContext | None = None
    ) -> ModelResponse:
        self.journal.record("model", self.model)
        aware: Any = self.wrapped  # a provider that takes the optional ``context``
        response: ModelResponse = aware.complete(messages, tools, context=context)
        return response


class RecordingTool:
    """A tool that journals each call's start, then makes it with the one it wraps.

    Any other attribute (``server``, ``check``, ...) is the wrapped tool's.
    """

    def __init__(self, tool: Tool, journal: CallJournal) -> None:
        self.wrapped = tool
        self.journal = journal
        self.name = tool.name
        self.description = tool.description
        self.parameters = tool.parameters
        self.requires_approval = tool.requires_approval
        self.idempotent: bool = getattr(tool, "idempotent", True)

    def __getattr__(self, name: str) -> Any:
        if name == "wrapped":  # not set yet (a copy being made): no recursion
            raise AttributeError(name)
        return getattr(self.wrapped, name)

    def __repr__(self) -> str:
        return f"RecordingTool({self.wrapped!r})"

    def execute(self, arguments: dict[str, Any]) -> Any:
        self.journal.record("tool", self.name)
        return self.wrapped.execute(arguments)


class RecordingContextTool(RecordingTool):
    """A ``RecordingTool`` of a tool that takes a ``context``."""

    def execute(self, arguments: dict[str, Any], context: CallContext | None = None) -> Any:
        self.journal.record("tool", self.name)
        aware: Any = self.wrapped  # a tool that takes the optional ``context``
        return aware.execute(arguments, context=context)


def recording_provider(provider: Provider, journal: CallJournal) -> Provider:
    """``provider``, recording each model call's start in ``journal``."""
    cls = RecordingContextProvider if accepts_context(provider.complete) else RecordingProvider
    return cls(provider, journal)


def recording_tool(tool: Tool, journal: CallJournal) -> Tool:
    """``tool``, recording each call's start in ``journal``."""
    cls = RecordingContextTool if accepts_context(tool.execute) else RecordingTool
    return cls(tool, journal)
