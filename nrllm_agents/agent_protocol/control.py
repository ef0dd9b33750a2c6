"""``POST .../runs/{id}/cancel``: the protocol's cancel onto our guarded cancel.

``action=interrupt`` cancels the run (``AgentRuntime.cancel``, source ``api``): the call in
flight is interrupted and recorded, and its partial turn stays in the thread. ``rollback``
does the same, then marks the run rolled back: its turn leaves the thread's transcript and it
reads 404 through the protocol, while the run, its steps and its cancel stay in the API, the
admin and the audit. ``wait=1`` answers only once the run has stopped (``stopped_at`` set, the
``cancelled`` step recorded); without it, as soon as the cancel is committed.
"""

from __future__ import annotations

from rest_framework.request import Request
from rest_framework.response import Response

from ..access import policy
from ..api.throttling import CANCEL_SCOPE
from ..conf import app_settings
from ..domain.errors import Kind, KindedError
from ..models import AgentRun, CancelSource
from ..runtime.agent_runtime import CancelOutcome
from ..validation.run_request import InvalidRequest
from . import shapes
from .base import ProtocolRunNotFound, ProtocolView
from .streaming import until_stopped


class RunAlreadyFinished(KindedError, RuntimeError):
    """The run had completed or failed: a cancel changes nothing (409)."""

    kind = Kind.CONFLICT

    def __init__(self, run_id: object, status: str) -> None:
        super().__init__(f"Run {run_id} is {status}; nothing was cancelled.")


FLAGS = {"1": True, "true": True, "0": False, "false": False, "": False}


class RunCancelView(ProtocolView):
    throttle = {"post": CANCEL_SCOPE}

    def post(self, request: Request, thread_id: str, run_id: str) -> Response:
        run = self.get_protocol_run(self.get_thread(thread_id), run_id, policy.Action.CANCEL)
        wait = FLAGS.get(str(request.query_params.get("wait", "")).lower())
        action = request.query_params.get("action") or "interrupt"
        if wait is None:
            raise InvalidRequest({"wait": "0 or 1"})
        if action not in ("interrupt", "rollback"):
            raise InvalidRequest({"action": "interrupt or rollback"})
        result = self.runtime.cancel(
            run.pk, by=request.user, source=CancelSource.API, reason=f"cancelled through the Agent Protocol ({action})"
        )
        if result.outcome == CancelOutcome.NOT_FOUND:
            raise ProtocolRunNotFound(run.pk)
        if result.outcome == CancelOutcome.ALREADY_FINISHED:
            raise RunAlreadyFinished(run.pk, result.status or "finished")
        if action == "rollback":
            # Not a status: the flag that takes the turn out of the transcript (as a thread's
            # ``rollback`` message does); the run stays, cancelled, in the audit.
            AgentRun.objects.filter(pk=run.pk).update(rolled_back=True)
        row = until_stopped(run.pk, app_settings.STREAM_MAX_SECONDS) if wait else AgentRun.objects.get(pk=run.pk)
        return Response(shapes.run(row), status=200 if wait else 202)
