"""The browser stream: ``GET /api/runs/<id>/stream/`` as Server-Sent Events.

A plain Django view (DRF cannot negotiate ``text/event-stream`` cleanly) that follows the run's
*stored* step stream, so it is the same for interactive and queued runs and for any process:
``step`` events (``id`` = sequence, resumed after ``Last-Event-ID``), ``delta`` frames while the
model writes, ``: keepalive`` comments, and one final status event before it closes. It waits to
be woken by the process's listener (PostgreSQL) or polls, holds an ``admission`` slot per user and
per process (429 past either) and gives it back however it ends. Who may stream which run is
``access.policy``'s decision; anything else is 404.

The protocol, the slot's release and the reverse-proxy settings: docs/internals.md ("The browser
stream") and docs/howto/browser.md.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

from django.core.handlers.asgi import ASGIRequest
from django.http import HttpRequest, JsonResponse, StreamingHttpResponse
from django.http.response import HttpResponseBase
from django.views.decorators.http import require_GET
from rest_framework.authentication import TokenAuthentication
from rest_framework.exceptions import AuthenticationFailed

from ..access import policy
from ..admission import Kind, Slot, SlotRefused, hold
from ..http import answers
from ..live.pacing import Clock, Pace
from ..live.push import StepData
from ..live.watch import Update, Watch
from ..money import amounts
from ..presentation import describe
from ..store import MAX_SEQUENCE
from ..store.db import release_connection
from .serializers import EventsQuerySerializer

RETRY_AFTER_SECONDS = 5

OPEN = "retry: 2000\n: stream open\n\n"  # reconnect delay for EventSource; a comment flushes headers


def final_data(status: dict[str, Any]) -> dict[str, Any]:
    """The final event: ``presenters.run_status_dict`` plus the words the page shows for it."""
    cancel = status.get("cancel")
    return {
        **status,
        "cancel_text": describe.cancel_text(cancel) if cancel else None,
        "cost_text": amounts.run_cost_text(status.get("cost")),
        "pending_text": [describe.call_text(call) for call in status.get("pending_approval") or []],
    }


def _json(data: dict[str, Any]) -> str:
    return json.dumps(data, separators=(",", ":"), default=str)


def step_json(step: dict[str, Any]) -> str:
    """A step as the stream sends it: the stored shape plus ``details``, the labelled lines
    ``describe`` gives it. The page's JavaScript renders them and describes nothing itself."""
    return _json({**step, "details": describe.lines(step["kind"], step.get("payload"))})


def sse_event(event: str, data: dict[str, Any] | str, event_id: int | None = None) -> str:
    """One SSE frame (``data`` a dict, or JSON already encoded), on one line: ``data:`` never
    needs splitting."""
    head = f"id: {event_id}\n" if event_id is not None else ""
    body = data if isinstance(data, str) else _json(data)
    return f"{head}event: {event}\ndata: {body}\n\n"


def _step_frame(step: dict[str, Any]) -> str:
    body = step.encoded(step_json) if isinstance(step, StepData) else step_json(step)
    return sse_event("step", body, step["sequence"])


def render(update: Update) -> str:
    """The frames of an update: steps (with their sequence as ``id``), deltas (no ``id``, so a
    reconnect's ``Last-Event-ID`` still names the last step), then the final event."""
    frames = [_step_frame(step) for step in update.steps]
    frames += [sse_event("delta", delta) for delta in update.deltas]
    frames += [sse_event("progress", report) for report in update.progress]
    if update.final is not None and update.final[1] is not None:
        frames.append(sse_event(update.final[0], final_data(update.final[1])))
    return "".join(frames)


def sync_stream(run_id: uuid.UUID, after: int, pace: Pace, slot: Slot) -> Iterator[str]:
    """The stream for WSGI servers: blocks its worker thread until something arrives."""
    clock = Clock(pace)
    watch = Watch(run_id, after, poll=pace.poll)
    try:
        yield OPEN
        while True:
            update = watch.update()
            frames, done = clock.after(render(update), update.finished)
            if frames:
                yield frames
            if done:
                return
            watch.wait(clock.wait_for(watch))
    finally:
        watch.close()
        slot.release()


async def async_stream(run_id: uuid.UUID, after: int, pace: Pace, slot: Slot) -> AsyncIterator[str]:
    """The stream for ASGI servers: waits on the event loop, reads in a worker thread."""
    clock = Clock(pace)
    watch = Watch(run_id, after, loop=asyncio.get_running_loop(), poll=pace.poll)
    try:
        yield OPEN
        while True:
            update = await watch.update_async()
            frames, done = clock.after(render(update), update.finished)
            if frames:
                yield frames
            if done:
                return
            await watch.wait_async(clock.wait_for(watch))
    finally:
        watch.close()
        slot.release()


def _user(request: HttpRequest) -> tuple[Any, str | None]:
    """The caller from a DRF token, else the session; with the reason a token was refused."""
    try:
        # The stubs want DRF's Request; the token check reads only ``META``, which this has.
        found = TokenAuthentication().authenticate(request)  # type: ignore[arg-type]
    except AuthenticationFailed as exc:
        return None, str(exc.detail)
    if found is not None:
        return found[0], None
    return request.user, None


def _resume_after(request: HttpRequest) -> int | None:
    """The last sequence the client has: ``Last-Event-ID`` wins over ``?after=``; -1 for none.

    Validated exactly as the events endpoint validates its ``after`` (``None`` when invalid).
    """
    raw = request.headers.get("Last-Event-ID") or None  # an empty header: the client has nothing yet
    if raw is None and "after" in request.GET:
        raw = request.GET["after"]
    if raw is None:
        return -1
    query = EventsQuerySerializer(data={"after": raw})
    return query.validated_data["after"] if query.is_valid() else None


@require_GET
def run_stream(request: HttpRequest, run_id: uuid.UUID) -> HttpResponseBase:
    """Stream a run's steps as Server-Sent Events (see the module docstring)."""
    user, refused = _user(request)
    if refused or not getattr(user, "is_authenticated", False):
        response = JsonResponse({"detail": refused or "Authentication credentials were not provided."}, status=401)
        response["WWW-Authenticate"] = "Token"
        return response
    run = policy.visible_runs(user).filter(pk=run_id).first()
    hidden = answers.refusal(policy.verdict(user, policy.Action.STREAM, run), policy.Action.STREAM)
    if hidden is not None:  # a visible run is always streamable: this is a 404
        return answers.json_response(hidden)
    after = _resume_after(request)
    if after is None:
        return JsonResponse(
            {"detail": f"Last-Event-ID / after must be a step sequence (an integer from -1 to {MAX_SEQUENCE})."},
            status=400,
        )
    slot = hold(Kind.STREAM, user.pk)
    if isinstance(slot, SlotRefused):
        return answers.json_response(answers.too_many(slot.detail, RETRY_AFTER_SECONDS))
    try:
        pace = Pace.from_settings()
        # Under ASGI a sync iterator would be consumed whole before sending; under WSGI an async one.
        stream = async_stream if isinstance(request, ASGIRequest) else sync_stream
        content = stream(run_id, after, pace, slot)
        streaming = _SlotResponse(slot, content, content_type="text/event-stream; charset=utf-8")
    except BaseException:
        slot.release()
        raise
    streaming["Cache-Control"] = "no-cache, no-transform"
    streaming["X-Accel-Buffering"] = "no"
    release_connection(idle=True)  # the checks above used this thread's connection; a stream holds none
    return streaming


class _SlotResponse(StreamingHttpResponse):
    """Gives the stream's slot back when the server closes the response, even unstarted."""

    def __init__(self, slot: Slot, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._slot = slot

    def close(self) -> None:
        try:
            super().close()
        finally:
            self._slot.release()
