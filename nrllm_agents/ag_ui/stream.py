"""One AG-UI stream of a run: ``RUN_STARTED``, the snapshots on a reattach, what the client
missed, then the run's events as its steps are stored and its text is written, and its end.

It follows the run's stored steps (``live.watch``) like every stream of ours, so a reconnect
(``Last-Event-ID``) resumes exactly after what the client had. The end is ``RUN_FINISHED``
(``success``; ``interrupt`` while the run waits for approval; ``cancelled`` for a cancelled run,
AG-UI 1.0's outcome for a run stopped on purpose) or ``RUN_ERROR`` for a failed one. A stream
open longer than ``STREAM_MAX_SECONDS`` closes without an end: the client reattaches.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from ..live.pacing import Clock, Pace
from ..live.watch import Watch
from ..models import AgentRun, RunStatus
from ..presentation.presenters import event_dict
from ..store.db import release_connection
from .events import Cursor, Event, Frame, Translator

PROTOCOL_VERSION = "1.0"


def sse(frame: Frame) -> str:
    event_id, event = frame
    head = f"id: {event_id}\n" if event_id is not None else ""
    return f"{head}data: {json.dumps(event, separators=(',', ':'), default=str)}\n\n"


def interrupts(run: AgentRun) -> list[dict[str, Any]]:
    """AG-UI interrupts for a waiting run: one per tool call that needs an approval."""
    calls = (run.suspended_state or {}).get("pending_calls") or []
    return [
        {
            "id": f"{run.pk}:{call.get('id')}",
            "reason": "tool_approval",
            "message": f"Approve the call to {call.get('name')}?",
            "toolCallId": str(call.get("id")),
        }
        for call in calls
    ] or [{"id": str(run.pk), "reason": "tool_approval", "message": "Approve the pending tool calls?"}]


def end(run: AgentRun | None, thread_key: str, client_run: str) -> Event:
    """The run's last event, by its status."""
    ids = {"threadId": thread_key, "runId": client_run}
    if run is None:
        return {"type": "RUN_ERROR", "message": "The run was deleted.", "code": "deleted"}
    if run.status == RunStatus.FAILED:
        return {"type": "RUN_ERROR", "message": run.error_message or run.termination_reason or "failed",
                "code": run.termination_reason or "failed"}  # fmt: skip
    if run.status == RunStatus.CANCELLED:
        return {"type": "RUN_FINISHED", **ids, "outcome": {"type": "cancelled"}}
    if run.status == RunStatus.WAITING_FOR_APPROVAL:
        return {"type": "RUN_FINISHED", **ids, "outcome": {"type": "interrupt", "interrupts": interrupts(run)}}
    return {"type": "RUN_FINISHED", **ids, "outcome": {"type": "success"}}


def _steps(run_id: Any, upto: int) -> list[dict[str, Any]]:
    row = AgentRun.objects.get(pk=run_id)
    return [event_dict(e) for e in row.events.filter(sequence__lte=upto).order_by("sequence")]


def opening(
    run: AgentRun, thread_key: str, client_run: str, cursor: Cursor | None, snapshot: bool
) -> tuple[Translator, int, list[Frame]]:
    """The translator where the client is, the last step it has, and the frames to open with."""
    frames: list[Frame] = [(None, {"type": "RUN_STARTED", "threadId": thread_key, "runId": client_run,
                                   "protocolVersion": PROTOCOL_VERSION})]  # fmt: skip
    translator = Translator(run.thread_id or run.pk, [])
    if snapshot:  # a reattach without a cursor: the client's messages are the snapshot's
        seen = _steps(run.pk, 1 << 62)
        translator.replay(seen)
        state = {"runId": str(run.pk), "status": run.status}
        frames += [(None, {"type": "MESSAGES_SNAPSHOT", "messages": translator.messages()}),
                   (None, {"type": "STATE_SNAPSHOT", "snapshot": state})]  # fmt: skip
        frames += translator.reopen()
        return translator, translator.last, frames
    if cursor is None:
        return translator, -1, frames
    if cursor.index is not None:  # inside step ``sequence``: the rest of it
        translator.replay(_steps(run.pk, cursor.sequence - 1))
        current = _steps(run.pk, cursor.sequence)[-1:]
        if current and current[0]["sequence"] == cursor.sequence:
            return translator, cursor.sequence, frames + translator.step(current[0], skip=cursor.index + 1)
        return translator, cursor.after, frames + translator.reopen()
    translator.replay(_steps(run.pk, cursor.sequence))
    if cursor.round is not None:
        translator.written[cursor.round] = cursor.offset
        translator.written_start(cursor.round)
    return translator, cursor.sequence, frames + translator.reopen()


def frames(run_id: Any, thread_key: str, client_run: str, cursor: Cursor | None, *, snapshot: bool) -> Iterator[str]:
    """The stream's text (see the module docstring)."""
    run = AgentRun.objects.get(pk=run_id)
    translator, after, first = opening(run, thread_key, client_run, cursor, snapshot)
    pace = Pace.from_settings()
    watch = Watch(run.pk, after, poll=pace.poll)
    release_connection(idle=True)
    clock = Clock(pace)
    try:
        out = [sse(f) for f in first]
        while True:
            update = watch.update()
            for step in update.steps:
                out += [sse(f) for f in translator.step(dict(step))]
            for delta in update.deltas:
                out += [sse(f) for f in translator.delta(delta)]
            if update.finished:
                row = AgentRun.objects.filter(pk=run.pk).first() if update.final and update.final[1] else None
                out += [sse(f) for f in translator.close_all()]
                out.append(sse((None, end(row, thread_key, client_run))))
            text, done = clock.after("".join(out), update.finished)
            out = []
            if text:
                yield text
            if done:
                return
            watch.wait(clock.wait_for(watch))
    finally:
        watch.close()
