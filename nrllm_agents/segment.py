"""One segment's trace hook: prove ownership, observe, record, and stop at a cancelled boundary.

``run()``, ``approve()`` and ``run_queued()`` all build their hook here, so they behave
identically at every step boundary.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import threading
import uuid
from typing import Any, Callable

from django.db import IntegrityError
from django.utils import timezone

from . import limits, store
from .domain import RunCancellationRequested, RunLeaseLost, SegmentInterrupted, Step, StepKind, ToolCall, Usage
from .models import AgentRunEvent
from .presenters import event_dict, step_dict

logger = logging.getLogger(__name__)

StepObserver = Callable[[dict[str, Any]], None]

shutdown_requested = threading.Event()
"""Set (by a worker's SIGTERM handler) when this process must hand its runs back to the queue."""


def identity(role: str) -> str:
    """Who executes a segment: ``role:host:pid:token`` (the token tells threads apart)."""
    return f"{role}:{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"


class SegmentTrace:
    """The trace hook handed to the tool loop for one segment.

    At each step, in order: hand it to ``on_step``; renew the lease with an
    ownership-guarded write and record the step in the same commit (the renewal is also the
    cancellation probe: it matches no row once the run is cancelled or lost); then stop if
    the run was cancelled.

    - cancelled while ours: the step in flight is recorded, then ``RunCancellationRequested``;
    - lost (reaped, owned by another segment): nothing is written, ``RunLeaseLost``;
    - the store cannot be reached: "not cancelled", the run goes on (never a fabricated cancel);
    - a failing observer is logged and ignored: watching never stops a run.

    It also tracks the spend so far, for the acknowledgement of a cancel.
    """

    def __init__(self, run_id: uuid.UUID, *, owner: str, next_sequence: int, on_step: StepObserver | None = None,
                 base_usage: Usage = Usage(), base_iterations: int = 0, interruptible: bool = False) -> None:
        self.run_id = run_id
        self.owner = owner
        self.next_sequence = next_sequence
        self.on_step = on_step
        self.usage = base_usage
        self.iterations = base_iterations
        self.interruptible = interruptible
        self.round = 0
        self.recorded = 0
        self._effect_stamped = False
        self.limits = limits.Enforcer(run_id)

    @property
    def last_sequence(self) -> int | None:
        return self.next_sequence - 1 if self.next_sequence else None

    def __call__(self, step: Step) -> None:
        sequence, created_at = self.next_sequence, timezone.now()
        if step.kind == StepKind.LLM:
            self.usage = self.usage + Usage.from_dict(step.payload.get("usage"))
            self.iterations += 1
        self.round = step.round
        if self.on_step is not None:  # building the dict is work the hot path skips when nobody watches
            self._notify(step_dict(run_id=self.run_id, sequence=sequence, kind=step.kind.value,
                                   round=step.round, duration_ms=step.duration_ms, payload=step.payload,
                                   created_at=created_at))
        cancelled = False
        try:
            recorded = store.record_step(self.run_id, self.owner, sequence, step, created_at)
            if recorded is not True:
                # Not renewed: cancelled while ours (the step in flight is still recorded), or
                # lost (raises, writing nothing); a store hiccup counts as "not cancelled".
                cancelled = recorded is False and self._check_ownership(False)
                store.append_event(self.run_id, sequence, step, created_at)
        except IntegrityError:
            # Someone else wrote this sequence: another segment owns the run now.
            raise RunLeaseLost() from None
        self.next_sequence += 1
        self.recorded += 1
        if self._effect_stamped and step.kind == StepKind.TOOL:
            # Cleared only after the tool's step is recorded: a crash in between leaves the
            # stamp, and the run is then dead-lettered rather than repeating the write.
            cleared = store.renew(self.run_id, self.owner, clear_effect=True)
            self._effect_stamped = cleared is None  # a store hiccup: try again after the next tool
        cancelled = cancelled or self.limits(step, self.usage) is not None  # a deadline or budget stops it here
        if cancelled:
            raise RunCancellationRequested(boundary_sequence=sequence)
        if self.interruptible and shutdown_requested.is_set():
            raise SegmentInterrupted()

    def before_effect(self, call: ToolCall) -> None:
        """Stamp the write fence right before a non-idempotent tool starts (with a renewal)."""
        renewed = store.renew(self.run_id, self.owner, effect={"call": call.as_dict(), "at": timezone.now().isoformat()})
        if self._check_ownership(renewed):
            raise RunCancellationRequested(boundary_sequence=self.last_sequence)
        self._effect_stamped = renewed is not False

    def _check_ownership(self, renewed: bool | None) -> bool:
        """``True`` when cancelled while ours; raises ``RunLeaseLost`` when not ours any more."""
        if renewed is not False:
            return False
        verdict = store.lost_or_cancelled(self.run_id, self.owner)
        if verdict == "lost":
            logger.warning("run %s: lease lost by %s; stopping without writing", self.run_id, self.owner)
            raise RunLeaseLost()
        return verdict == "cancelled"

    def _notify(self, data: dict[str, Any]) -> None:
        if self.on_step is None:
            return
        try:
            self.on_step(data)
        except Exception:
            logger.exception("step observer failed for run %s; the run goes on", self.run_id)

    def acknowledge_cancel(self) -> AgentRunEvent | None:
        """Record that this segment stopped for a cancel (once per run) and tell the observer."""
        event = store.acknowledge_cancel(self.run_id, sequence=self.next_sequence, boundary=self.last_sequence,
                                         round=self.round, iterations=self.iterations, usage=self.usage,
                                         owner=self.owner)
        if event is not None:
            self.next_sequence += 1
            self.recorded += 1
            self._notify(event_dict(event))
        return event
