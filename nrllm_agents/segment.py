"""One segment's trace hook: observe, persist, probe, and stop at a cancelled boundary.

``run()``, ``approve()`` and ``run_queued()`` all build their hook here, so they behave
identically at every step boundary.
"""

from __future__ import annotations

import logging
import os
import socket
import uuid
from typing import Any, Callable

from django.utils import timezone

from . import store
from .domain import RunCancellationRequested, Step, StepKind, Usage
from .models import AgentRunEvent, RunStatus
from .presenters import event_dict, step_dict

logger = logging.getLogger(__name__)

StepObserver = Callable[[dict[str, Any]], None]


def identity(role: str) -> str:
    """Who executes a segment: ``role:host:pid``."""
    return f"{role}:{socket.gethostname()}:{os.getpid()}"


class SegmentTrace:
    """The trace hook handed to the tool loop for one segment.

    At each step, in order: hand it to ``on_step``; persist it; re-read the run's status;
    if cancelled, raise ``RunCancellationRequested``. A failing probe counts as "not
    cancelled". A failing observer is logged and ignored: watching never stops a run.
    It also tracks the spend so far, for the acknowledgement of a cancel.
    """

    def __init__(self, run_id: uuid.UUID, *, next_sequence: int, on_step: StepObserver | None = None,
                 base_usage: Usage = Usage(), base_iterations: int = 0) -> None:
        self.run_id = run_id
        self.next_sequence = next_sequence
        self.on_step = on_step
        self.usage = base_usage
        self.iterations = base_iterations
        self.round = 0
        self.recorded = 0

    @property
    def last_sequence(self) -> int | None:
        return self.next_sequence - 1 if self.next_sequence else None

    def __call__(self, step: Step) -> None:
        sequence, created_at = self.next_sequence, timezone.now()
        if step.kind == StepKind.LLM:
            self.usage = self.usage + Usage.from_dict(step.payload.get("usage"))
            self.iterations += 1
        self.round = step.round
        self._notify(step_dict(run_id=self.run_id, sequence=sequence, kind=step.kind.value, round=step.round,
                               duration_ms=step.duration_ms, payload=step.payload, created_at=created_at))
        store.append_event(self.run_id, sequence, step, created_at)
        self.next_sequence += 1
        self.recorded += 1
        if store.probe_status(self.run_id) == RunStatus.CANCELLED:
            raise RunCancellationRequested(boundary_sequence=sequence)

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
                                         round=self.round, iterations=self.iterations, usage=self.usage)
        if event is not None:
            self.next_sequence += 1
            self.recorded += 1
            self._notify(event_dict(event))
        return event
