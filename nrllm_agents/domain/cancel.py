"""The cancel token: how a cancel reaches the model call or tool call in flight.

The runtime creates one token per segment and trips it only once the run's row says
``cancelled`` (the row is the truth; the token only makes the stop sooner). Providers and
tools that accept a ``context`` argument get a ``CallContext`` holding it: they may sleep on
it (``wait``), poll it (``cancelled``), stop themselves (``raise_if_cancelled``) or register a
callback that aborts their I/O (``on_cancel``). Work that ignores the token runs to its step
boundary, where the boundary probe stops the run as before.

Plain Python: no Django, no database.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .steps import ModelResponse

logger = logging.getLogger(__name__)


class StepInterrupted(BaseException):
    """The step in flight was cut short by a cancel.

    Raised by a provider or tool (or by ``CancelToken.raise_if_cancelled``); the loop records
    the step as interrupted and the run stops as cancelled. A ``BaseException`` so that a
    tool's ``except Exception`` cannot swallow it. ``partial`` is what a model call had
    produced so far (content, tool-call fragments, usage), when there is any; ``details`` is
    what a tool call had seen (e.g. an MCP server's progress), recorded on its step.
    """

    def __init__(
        self,
        message: str | None = None,
        *,
        partial: ModelResponse | None = None,
        usage_estimated: bool = False,
        partial_tool_calls: list[dict[str, Any]] | None = None,
        details: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message or "the step in flight was interrupted by a cancel")
        self.partial = partial
        self.usage_estimated = usage_estimated
        self.partial_tool_calls = partial_tool_calls or []
        self.details = details or {}


class CancelToken:
    """Tripped once, when the run this segment executes is cancelled; thread-safe.

    ``cancelled`` tells whether it was tripped, ``wait(seconds)`` sleeps unless tripped
    (returns ``True`` when tripped), ``raise_if_cancelled()`` raises ``StepInterrupted``, and
    ``on_cancel(callback)`` calls ``callback()`` once on the tripping thread (at once, if
    already tripped) and returns a function that unregisters it.
    """

    def __init__(self) -> None:
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._callbacks: dict[int, Callable[[], None]] = {}
        self._next = 0
        self._shielded = False
        self.handing_back = False  # tripped by hand_back (the process shuts down), not by a cancel

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()

    def wait(self, seconds: float | None = None) -> bool:
        """Sleep up to ``seconds`` (forever with ``None``); ``True`` as soon as the token trips."""
        return self._event.wait(seconds)

    def raise_if_cancelled(self) -> None:
        """Raise ``StepInterrupted`` when the token has tripped; return otherwise."""
        if self._event.is_set():
            raise StepInterrupted()

    def on_cancel(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback`` when the token trips (now, if it has); returns the unregister function."""
        with self._lock:
            if not self._event.is_set():
                key, self._next = self._next, self._next + 1
                self._callbacks[key] = callback
                return lambda: self._forget(key)
        _safely(callback)
        return lambda: None

    def _forget(self, key: int) -> None:
        with self._lock:
            self._callbacks.pop(key, None)

    def cancel(self) -> bool:
        """Trip the token and run its callbacks; ``False`` when it had already tripped."""
        return self._trip(hand_back=False)

    def hand_back(self) -> bool:
        """Trip the token because this process shuts down, not because the run was cancelled.

        The step in flight ends as promptly as for a cancel, but ``handing_back`` is set: the
        runtime then records nothing of that step and hands the run back to the queue, where
        another worker repeats the step. Refused (``False``) while shielded (a non-idempotent
        tool is running: it must finish, and the run is handed back at its boundary) or when
        the token has already tripped.
        """
        return self._trip(hand_back=True)

    def shield(self, on: bool) -> None:
        """While on, ``hand_back`` does not trip the token (a cancel still does)."""
        with self._lock:
            self._shielded = on

    def _trip(self, *, hand_back: bool) -> bool:
        with self._lock:
            if self._event.is_set() or (hand_back and self._shielded):
                return False
            self.handing_back = hand_back
            self._event.set()
            callbacks, self._callbacks = list(self._callbacks.values()), {}
        for callback in callbacks:
            _safely(callback)
        return True


def _safely(callback: Callable[[], None]) -> None:
    try:
        callback()
    except Exception:  # an abort that fails must not stop the others, nor the tripping thread
        logger.exception("a cancel callback failed")


class _Never(CancelToken):
    """A token that cannot trip."""

    def _trip(self, *, hand_back: bool) -> bool:
        return False


NEVER: CancelToken = _Never()
"""A token nobody trips: the default for loops and calls driven without a runtime."""


DeltaSink = Callable[[str], None]
ProgressSink = Callable[[float, "float | None", "str | None"], None]


@dataclass
class CallContext:
    """What a model call or tool call receives besides its input.

    ``token``: the segment's cancel token. ``on_delta``: for a model call, where to publish
    the answer's text as it streams in (short-lived, never recorded as a step). ``round``:
    the loop round this call belongs to. ``call_index``: how many model calls this run made
    before this one (its own, whatever transcript it started from: a fork's copied turns do
    not count); ``None`` when the caller does not know. ``headers``: the W3C trace context
    (``traceparent``, ``tracestate``) that carries the run's trace to this call: a provider sends
    them with its HTTP requests, an MCP tool in its request's ``_meta``; empty when nothing traces.
    ``on_progress``: for a tool call, where to report how far it got (``progress``); shown live
    to the run's watchers, never recorded by this path. ``idempotency_key``: for a tool call of a
    run, a key that is the same every time this call is executed (a retry after a requeue, a lost
    worker or a hand-back) and different for every other call (``domain/idempotency.py``): hand it
    to an API that honours idempotency keys; ``None`` for a model call, or a call outside a run.
    """

    token: CancelToken = field(default_factory=lambda: NEVER)
    on_delta: DeltaSink | None = None
    round: int = 0
    call_index: int | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    on_progress: ProgressSink | None = None
    idempotency_key: str | None = None

    def progress(self, value: float, total: float | None = None, message: str | None = None) -> None:
        """Report how far a tool call got (``7`` of ``20``, a message); a failing sink never stops the call."""
        if self.on_progress is not None:
            try:
                self.on_progress(value, total, message)
            except Exception:
                logger.exception("a progress sink failed; the call goes on")

    def delta(self, text: str) -> None:
        """Publish a piece of streamed text; a failing sink never stops the call."""
        if self.on_delta is not None and text:
            try:
                self.on_delta(text)
            except Exception:
                logger.exception("a delta sink failed; the call goes on")
