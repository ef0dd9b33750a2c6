"""The browser stream: ``GET /api/runs/<id>/stream/`` as Server-Sent Events.

A plain Django view (DRF cannot negotiate ``text/event-stream`` cleanly). It follows the
run's *stored* step stream, so it works the same for interactive and queued runs executed by
any process:

- each step is ``event: step`` with ``id: <sequence>`` and ``presenters.step_dict`` as data;
- a reconnect resumes after the ``Last-Event-ID`` header (or ``?after=<sequence>``): no step
  is sent twice and none is skipped;
- ``: keepalive`` comments keep idle connections open (``STREAM_HEARTBEAT_SECONDS``);
- once ``presenters.stream_finished(run)`` holds, a final ``done`` / ``cancelled`` /
  ``awaiting_approval`` / ``failed`` event carries ``presenters.run_status_dict`` and the
  stream closes. A stream still open after ``STREAM_MAX_SECONDS`` closes without a final
  event; ``EventSource`` reconnects by itself with ``Last-Event-ID``.

Authentication: the session, or a DRF token (``Authorization: Token <key>``). Who may
stream which run is ``nrllm_agents.policy``'s decision; anything else is 404.

Served by a sync generator under WSGI (runserver, gunicorn gthread) and an async generator
under ASGI (uvicorn), never buffered by Django. Behind a reverse proxy, responses carry
``Cache-Control: no-cache`` and ``X-Accel-Buffering: no`` (nginx honours the latter); also
set ``proxy_buffering off;`` and a ``proxy_read_timeout`` above the heartbeat interval, use
HTTP/1.1 to the upstream (``proxy_http_version 1.1; proxy_set_header Connection "";``), and
do not gzip ``text/event-stream``. Under gunicorn each open stream holds one thread: size
``--threads`` for the number of watchers.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

from asgiref.sync import sync_to_async
from django.core.handlers.asgi import ASGIRequest
from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.views.decorators.http import require_GET
from rest_framework.authentication import TokenAuthentication
from rest_framework.exceptions import AuthenticationFailed

from .. import store
from ..conf import app_settings
from .. import policy
from ..api.serializers import MAX_SEQUENCE, EventsQuerySerializer
from ..models import AgentRun
from ..presenters import event_dict, final_event_name, run_status_dict, stream_finished

BATCH = 500  # steps read per query while draining
OPEN = "retry: 2000\n: stream open\n\n"  # reconnect delay for EventSource; a comment flushes headers
KEEPALIVE = ": keepalive\n\n"


def sse_event(event: str, data: dict[str, Any], event_id: int | None = None) -> str:
    """One SSE frame. JSON is written on one line, so ``data:`` never needs splitting."""
    head = f"id: {event_id}\n" if event_id is not None else ""
    return f"{head}event: {event}\ndata: {json.dumps(data, separators=(',', ':'), default=str)}\n\n"


@dataclass(frozen=True)
class Pace:
    """Timing of one stream (seconds)."""

    poll: float
    heartbeat: float
    max_seconds: float

    @classmethod
    def from_settings(cls) -> Pace:
        return cls(poll=float(app_settings.STREAM_POLL_SECONDS),
                   heartbeat=float(app_settings.STREAM_HEARTBEAT_SECONDS),
                   max_seconds=float(app_settings.STREAM_MAX_SECONDS))


class RunFollower:
    """Reads a run's stored stream forward from a sequence, as SSE frames."""

    def __init__(self, run_id: uuid.UUID, after: int) -> None:
        self.run_id = run_id
        self.last = after

    def poll(self) -> tuple[str, bool]:
        """New frames since the last poll, and whether the stream is over.

        The run's status is read *before* the steps: a run seen finished has every step
        committed already, so the drain that follows misses none of them.
        """
        run = AgentRun.objects.select_related("cancelled_by").filter(pk=self.run_id).first()
        if run is None:  # deleted while followed: nothing more will come
            return "", True
        finished = stream_finished(run)
        frames: list[str] = []
        while True:
            batch = list(store.events(self.run_id, after=self.last, limit=BATCH))
            for event in batch:
                frames.append(sse_event("step", event_dict(event), event.sequence))
                self.last = event.sequence
            if len(batch) < BATCH:
                break
        if finished:
            frames.append(sse_event(final_event_name(run.status) or run.status, run_status_dict(run)))
        return "".join(frames), finished


class _Clock:
    """Decides when to send a keepalive and when a long stream should close."""

    def __init__(self, pace: Pace) -> None:
        self.pace = pace
        self.started = self.last_write = time.monotonic()

    def wrote(self) -> None:
        self.last_write = time.monotonic()

    def expired(self) -> bool:
        return time.monotonic() - self.started >= self.pace.max_seconds

    def keepalive_due(self) -> bool:
        return time.monotonic() - self.last_write >= self.pace.heartbeat


def sync_stream(follower: RunFollower, pace: Pace) -> Iterator[str]:
    """The stream for WSGI servers: blocks its worker thread between polls."""
    clock = _Clock(pace)
    yield OPEN
    while True:
        frames, finished = follower.poll()
        if frames:
            yield frames
            clock.wrote()
        if finished or clock.expired():
            return
        if clock.keepalive_due():
            yield KEEPALIVE
            clock.wrote()
        time.sleep(pace.poll)


async def async_stream(follower: RunFollower, pace: Pace) -> AsyncIterator[str]:
    """The stream for ASGI servers: database reads in a thread, waits on the event loop."""
    clock = _Clock(pace)
    poll = sync_to_async(follower.poll)
    yield OPEN
    while True:
        frames, finished = await poll()
        if frames:
            yield frames
            clock.wrote()
        if finished or clock.expired():
            return
        if clock.keepalive_due():
            yield KEEPALIVE
            clock.wrote()
        await asyncio.sleep(pace.poll)


def _user(request: HttpRequest) -> tuple[Any, str | None]:
    """The caller from a DRF token, else the session; with the reason a token was refused."""
    try:
        found = TokenAuthentication().authenticate(request)
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
def run_stream(request: HttpRequest, run_id: uuid.UUID) -> HttpResponse:
    """Stream a run's steps as Server-Sent Events (see the module docstring)."""
    user, refused = _user(request)
    if refused or not getattr(user, "is_authenticated", False):
        response = JsonResponse({"detail": refused or "Authentication credentials were not provided."},
                                status=401)
        response["WWW-Authenticate"] = "Token"
        return response
    run = policy.visible_runs(user).filter(pk=run_id).first()
    if run is None or not policy.may(user, policy.Action.STREAM, run):
        return JsonResponse({"detail": "Not found."}, status=404)
    after = _resume_after(request)
    if after is None:
        return JsonResponse({"detail": f"Last-Event-ID / after must be a step sequence (an integer from -1 to "
                                       f"{MAX_SEQUENCE})."},
                            status=400)
    follower, pace = RunFollower(run_id, after), Pace.from_settings()
    # Under ASGI a sync iterator would be consumed whole before sending; under WSGI an async one.
    content = async_stream(follower, pace) if isinstance(request, ASGIRequest) else sync_stream(follower, pace)
    response = StreamingHttpResponse(content, content_type="text/event-stream; charset=utf-8")
    response["Cache-Control"] = "no-cache, no-transform"
    response["X-Accel-Buffering"] = "no"
    return response
