"""Following a run for the protocol: an SSE stream of its parts, and the blocking waits of
``wait``, ``join`` and ``cancel?wait=1``.

The stream follows the run's stored steps (``live.watch``), like the browser's: a reconnect
with ``Last-Event-ID`` resumes after that step, and a stream still open after
``STREAM_MAX_SECONDS`` closes; the SDKs then ask the run and reconnect to the ``Location``
the stream named. Each stream (and each blocking wait) holds a ``STREAM`` slot of its caller.
Served by a sync generator (WSGI: runserver, gunicorn gthread).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

from django.http import StreamingHttpResponse

from ..admission import Slot
from ..live.pacing import Clock, Pace
from ..live.watch import Watch
from ..models import AgentRun, RunStatus
from ..presentation.presenters import event_dict
from ..store.db import release_connection
from . import state as st
from .events import Part, Translator
from .statuses import finished


def frame(event: str, data: Any, event_id: int | None = None) -> str:
    head = f"id: {event_id}\n" if event_id is not None else ""
    return f"{head}event: {event}\ndata: {json.dumps(data, separators=(',', ':'), default=str)}\n\n"


def error_of(run: AgentRun) -> dict[str, Any] | None:
    """The ``error`` part of a failed run."""
    if run.status != RunStatus.FAILED:
        return None
    return {"error": run.error_class or "Error", "message": run.error_message or run.termination_reason}


def parts(run_id: Any, after: int, modes: tuple[str, ...], pace: Pace) -> Iterator[str]:
    """The run's frames after step ``after``: a ``metadata`` part first, then what each
    update adds, then the end (``Translator.end``)."""
    row = AgentRun.objects.get(pk=run_id)
    seen = [event_dict(e) for e in row.events.filter(sequence__lte=after).order_by("sequence")] if after >= 0 else []
    translator = Translator(row.pk, row.thread_id, modes, seen)
    watch = Watch(row.pk, after, poll=pace.poll)
    release_connection(idle=True)
    clock = Clock(pace)
    try:
        yield frame("metadata", {"run_id": str(row.pk), "thread_id": str(row.thread_id), "attempt": 1})
        while True:
            update = watch.update()
            out: list[str] = []
            for step in update.steps:
                out += [frame(e, d, step["sequence"]) for e, d in translator.step(step)]
            for delta in update.deltas:
                out += [frame(e, d) for e, d in translator.delta(delta)]
            if update.finished:
                out += [frame(e, d) for e, d in _end(translator, row.pk)]
            text, done = clock.after("".join(out), update.finished)
            if text:
                yield text
            if done:
                return
            watch.wait(clock.wait_for(watch))
    finally:
        watch.close()


def _end(translator: Translator, run_id: Any) -> list[Part]:
    row = AgentRun.objects.select_related("thread").get(pk=run_id)
    values = st.values(row.thread_id, row) if row.thread_id else {"messages": []}
    return translator.end(values, st.interrupts(row), error_of(row))


class SlotStream(StreamingHttpResponse):
    """An SSE response that gives its slot back however it ends (even unstarted)."""

    def __init__(self, slot: Slot, content: Iterator[str], headers: dict[str, str]) -> None:
        super().__init__(self._guarded(slot, content), content_type="text/event-stream; charset=utf-8")
        self._slot = slot
        self["Cache-Control"] = "no-cache, no-transform"
        self["X-Accel-Buffering"] = "no"
        for name, value in headers.items():
            self[name] = value

    @staticmethod
    def _guarded(slot: Slot, content: Iterator[str]) -> Iterator[str]:
        try:
            yield from content
        finally:
            slot.release()

    def close(self) -> None:
        try:
            super().close()
        finally:
            self._slot.release()


def wait_until(run_id: Any, done: Any, *, timeout: float, poll: float = 0.2) -> AgentRun:
    """The run once ``done(run)`` holds (or after ``timeout`` seconds, as it is then).

    Woken by the run's pushed steps where the process listens, else polling every ``poll``.
    """
    watch = Watch(run_id, poll=poll)
    deadline = time.monotonic() + timeout
    try:
        while True:
            row = AgentRun.objects.get(pk=run_id)
            if done(row) or time.monotonic() >= deadline:
                return row
            release_connection(idle=True)
            watch.update()
            watch.wait(min(poll, max(0.0, deadline - time.monotonic())))
    finally:
        watch.close()


def until_finished(run_id: Any, timeout: float) -> AgentRun:
    """``wait_until`` the run has nothing more to do for now (``statuses.finished``)."""
    return wait_until(run_id, finished, timeout=timeout)


def until_stopped(run_id: Any, timeout: float) -> AgentRun:
    """``wait_until`` the run stopped: settled, waiting, or its cancel acknowledged."""
    return wait_until(
        run_id, lambda r: r.stopped_at is not None or r.status == RunStatus.WAITING_FOR_APPROVAL, timeout=timeout
    )
