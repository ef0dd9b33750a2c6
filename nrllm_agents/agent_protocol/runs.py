"""``/threads/{id}/runs`` and ``/runs``: start, stream, wait for, list, read and delete runs.

A threadless run (``/runs``, ``/runs/stream``, ``/runs/wait``) gets a thread of its own, as
LangGraph's server does. ``wait`` answers the thread's final ``values`` (``__interrupt__``
while the run waits for approval, ``__error__`` when it failed), once the run has nothing
more to do or after ``STREAM_MAX_SECONDS``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

from django.urls import reverse
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response

from ..access import policy
from ..admission import Kind, Slot, SlotRefused, hold
from ..api.throttling import CREATE_SCOPE
from ..conf import app_settings
from ..domain.errors import Kind as ErrorKind
from ..domain.errors import KindedError
from ..http import answers
from ..live.pacing import Pace
from ..models import AgentRun, CancelSource, RunStatus
from ..validation.run_request import InvalidRequest
from . import shapes
from . import state as st
from .base import ProtocolView
from .paging import page_of
from .requests import stream_modes
from .starting import Started, start
from .statuses import RUN_STATUS
from .streaming import SlotStream, error_of, parts, until_finished

RETRY_AFTER_SECONDS = 5
# A stream whose client leaving cancels its run writes a keepalive at least this often while
# silent: a write to a closed connection is how a WSGI server learns the client left (the
# first write after the close is refused by the peer, the next fails), so the cancel follows
# within about two of these.
DISCONNECT_PROBE_SECONDS = 0.25


class RunStillActive(KindedError, RuntimeError):
    """The run has not stopped; cancel it first."""

    kind = ErrorKind.CONFLICT

    def detail(self) -> str:
        return "The run has not stopped: cancel it first."


def stream_slot(request: Request) -> Slot:
    """A stream slot of the caller, else a 429 (``admission``, as the browser stream)."""
    slot = hold(Kind.STREAM, request.user.pk)
    if isinstance(slot, SlotRefused):
        raise answers.Refused(answers.too_many(slot.detail, RETRY_AFTER_SECONDS))
    return slot


def run_urls(request: Request, thread_id: Any, run_id: Any) -> dict[str, str]:
    """``Content-Location`` (the SDKs' ``on_run_created``) and ``Location`` (where a cut
    stream reconnects), absolute."""
    run = reverse("nrllm_lg:run-detail", args=[thread_id, run_id])
    stream = reverse("nrllm_lg:run-stream", args=[thread_id, run_id])
    return {"Content-Location": request.build_absolute_uri(run), "Location": request.build_absolute_uri(stream)}


def created_at(request: Request, run: AgentRun) -> dict[str, str]:
    """The ``Content-Location`` header naming a run just created."""
    return {"Content-Location": run_urls(request, run.thread_id, run.pk)["Content-Location"]}


def final_values(run: AgentRun) -> dict[str, Any]:
    """What ``wait`` and ``join`` answer: the thread's values after ``run``."""
    values = st.values(run.thread_id, run)
    pending = st.interrupts(run)
    if pending:
        values["__interrupt__"] = pending
    error = error_of(run)
    if error is not None:
        values["__error__"] = error
    return values


def sse(
    request: Request,
    thread_id: Any,
    run_id: Any,
    after: int,
    modes: tuple[str, ...],
    slot: Slot,
    on_leave: Callable[[], None] | None = None,
) -> SlotStream:
    """The run's stream; ``on_leave``: called when the client leaves before the run stops
    (``on_disconnect="cancel"``), the stream probing its client while it is silent."""
    try:
        pace = Pace.from_settings()
        if on_leave is None:
            content = parts(run_id, after, modes, pace)
        else:
            pace = replace(pace, heartbeat=min(pace.heartbeat, DISCONNECT_PROBE_SECONDS))
            content = left_early(parts(run_id, after, modes, pace), on_leave)
        return SlotStream(slot, content, run_urls(request, thread_id, run_id))
    except BaseException:
        slot.release()
        raise


def left_early(content: Iterator[str], on_leave: Callable[[], None]) -> Iterator[str]:
    """``content``, calling ``on_leave`` if it is closed before its end: the WSGI server closes
    it when a write to the client fails (the client left). An error of the stream's own is no
    leaving: it cancels nothing."""
    try:
        yield from content
    except GeneratorExit:
        on_leave()
        raise


class RunCreateView(ProtocolView):
    """``POST .../runs``: a background run; the answer is the ``Run``."""

    throttle = {"post": CREATE_SCOPE}

    def post(self, request: Request, thread_id: str | None = None) -> Response:
        started = start(self, self.runtime, thread_id)
        row = AgentRun.objects.get(pk=started.run_id)
        return Response(
            shapes.run(row), headers={"Content-Location": run_urls(request, row.thread_id, row.pk)["Content-Location"]}
        )

    def get(self, request: Request, thread_id: str | None = None) -> Response:
        if thread_id is None:
            raise answers.Refused(answers.Answer(405, {"detail": 'Method "GET" not allowed.'}))
        thread = self.get_thread(thread_id)
        limit, offset = page_of(request.query_params)
        runs = st.shown_runs(thread).order_by("-thread_position")
        wanted = request.query_params.get("status")
        if wanted:
            ours = [k for k, v in RUN_STATUS.items() if v == wanted]
            if not ours and wanted != "timeout":
                raise InvalidRequest({"status": f"one of {', '.join(sorted(set(RUN_STATUS.values())))}, timeout"})
            runs = runs.filter(status__in=ours or [RunStatus.CANCELLED])
        rows = [shapes.run(r) for r in runs[offset : offset + limit]]
        return Response([r for r in rows if not wanted or r["status"] == wanted])


class RunStreamView(ProtocolView):
    """``POST .../runs/stream``: start a run and stream it."""

    throttle = {"post": CREATE_SCOPE}

    def post(self, request: Request, thread_id: str | None = None) -> Any:
        slot = stream_slot(request)  # before the run exists: a refused stream starts nothing
        try:
            started: Started = start(self, self.runtime, thread_id)
        except BaseException:
            slot.release()
            raise
        on_leave = None
        if started.cancel_on_disconnect:
            runtime, user, run_id = self.runtime, request.user, started.run_id

            def on_leave() -> None:
                reason = "the client streaming it left (on_disconnect=cancel)"
                runtime.cancel(run_id, by=user, source=CancelSource.API, reason=reason)  # a finished run: no-op

        return sse(request, started.thread.pk, started.run_id, started.after, started.modes, slot, on_leave)


class RunWaitView(ProtocolView):
    """``POST .../runs/wait``: start a run and answer its final values."""

    throttle = {"post": CREATE_SCOPE}

    def post(self, request: Request, thread_id: str | None = None) -> Response:
        slot = stream_slot(request)
        try:
            started = start(self, self.runtime, thread_id)
            row = until_finished(started.run_id, app_settings.STREAM_MAX_SECONDS)
        finally:
            slot.release()
        return Response(
            final_values(row),
            headers={"Content-Location": run_urls(request, row.thread_id, row.pk)["Content-Location"]},
        )


class RunDetailView(ProtocolView):
    def get(self, request: Request, thread_id: str, run_id: str) -> Response:
        return Response(shapes.run(self.get_protocol_run(self.get_thread(thread_id), run_id)))

    def delete(self, request: Request, thread_id: str, run_id: str) -> Response:
        run = self.get_protocol_run(self.get_thread(thread_id), run_id, policy.Action.CANCEL)
        if run.stopped_at is None and run.status != RunStatus.WAITING_FOR_APPROVAL:
            raise RunStillActive()
        # The protocol's delete is a flag: the run and its steps stay in the API and the audit.
        AgentRun.objects.filter(pk=run.pk).update(hidden_from_protocol=True)
        return Response(status=status.HTTP_204_NO_CONTENT)


class RunJoinView(ProtocolView):
    """``GET .../runs/{id}/join``: the run's final values, once it has nothing more to do."""

    def get(self, request: Request, thread_id: str, run_id: str) -> Response:
        run = self.get_protocol_run(self.get_thread(thread_id), run_id)
        slot = stream_slot(request)
        try:
            row = until_finished(run.pk, app_settings.STREAM_MAX_SECONDS)
        finally:
            slot.release()
        return Response(final_values(row))


class RunJoinStreamView(ProtocolView):
    """``GET .../runs/{id}/stream``: follow a run; ``Last-Event-ID`` resumes after that step."""

    def get(self, request: Request, thread_id: str, run_id: str) -> Any:
        thread = self.get_thread(thread_id)
        run = self.get_protocol_run(thread, run_id)
        raw = request.headers.get("Last-Event-ID") or ""
        try:
            after = int(raw.split(".")[0]) if raw else -1
        except ValueError:
            raise InvalidRequest({"Last-Event-ID": "the id of a part of this stream"}) from None
        if not -1 <= after <= 10**9:
            raise InvalidRequest({"Last-Event-ID": "the id of a part of this stream"})
        modes = request.query_params.getlist("stream_mode") or ["values", "updates", "messages-tuple"]
        return sse(request, thread.pk, run.pk, after, stream_modes(modes), stream_slot(request))
