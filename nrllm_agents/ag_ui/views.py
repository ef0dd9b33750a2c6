"""``POST ag-ui/agents/<name>/``: AG-UI's ``RunAgentInput`` in, the run as AG-UI events out;
``POST ag-ui/runs/<runId>/cancel/``: the client's Stop.

The body's ``threadId`` names a thread of ours (created with that id when the caller has none);
its last ``user`` message is the new message. Its ``runId`` is the client's: a new one starts a
run of the saved agent on the thread (``claims.start``), one that names a run already streams
that run again (a reattach: the snapshots first, or, with ``Last-Event-ID``, what the client
missed). ``resume`` answers the interrupt of the thread's waiting run (our approval).

The REST API's credentials (a DRF token as ``Authorization: Token``/``Bearer``, or the session
with its CSRF token), its policy, its create and cancel rate limits, and a stream slot per
stream. A disconnect cancels nothing: the run goes on and a reconnect finds it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from django.db import transaction
from django.http import StreamingHttpResponse
from rest_framework.authentication import SessionAuthentication, TokenAuthentication
from rest_framework.exceptions import ParseError
from rest_framework.negotiation import BaseContentNegotiation
from rest_framework.parsers import JSONParser
from rest_framework.permissions import IsAuthenticated
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView
from rest_framework.views import exception_handler as drf_exception_handler

from .. import admission
from ..access import policy
from ..domain.errors import Kind, KindedError
from ..http import answers
from ..models import Agent, AgentRun, RunStatus, Thread
from ..runtime import threads
from ..runtime.agent_runtime import AgentRuntime, ApprovalNotPending, parse_run_id
from ..validation.run_request import InvalidRequest, RunRequest, unstorable
from . import claims
from .events import Cursor
from .stream import frames

RETRY_AFTER_SECONDS = 5
MAX_ID_CHARS = 200


class BearerAuthentication(TokenAuthentication):
    """A DRF token as ``Authorization: Bearer <key>`` (what ``HttpAgent``'s ``headers`` send)."""

    keyword = "Bearer"


class JSONErrors(BaseContentNegotiation):
    """Errors in JSON whatever ``Accept`` says (``HttpAgent`` accepts ``text/event-stream``
    only; the stream itself is not DRF's to render)."""

    def select_parser(self, request: Request, parsers: Any) -> Any:
        return parsers[0] if parsers else None

    def select_renderer(self, request: Request, renderers: Any, format_suffix: str | None = None) -> Any:
        return renderers[0], renderers[0].media_type


class AgentNotFound(KindedError, LookupError):
    """No saved agent by that name."""

    kind = Kind.NOT_FOUND

    def detail(self) -> str:
        return "Agent not found."


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """``http.answers`` for refusals and domain errors, else DRF's; every body has ``detail``."""
    answer = answers.for_error(exc)
    if answer is not None:
        body = answer.body if "detail" in answer.body else {"detail": answer.detail, "errors": answer.body}
        return Response(body, status=answer.status, headers=answer.headers or None)
    response = drf_exception_handler(exc, context)
    if response is not None and isinstance(response.data, dict) and "detail" not in response.data:
        response.data = {"detail": "; ".join(f"{k}: {v}" for k, v in response.data.items())}
    return response


def _string(data: dict[str, Any], name: str, *, required: bool = True) -> str:
    value = data.get(name)
    if value is None and not required:
        return ""
    if not isinstance(value, str) or not value.strip() or len(value) > MAX_ID_CHARS or unstorable(value):
        raise InvalidRequest({name: f"a string of 1 to {MAX_ID_CHARS} characters"})
    return value


def last_user_text(messages: Any) -> str:
    """The text of the input's last ``user`` message (AG-UI sends the whole conversation; the
    thread already holds what came before)."""
    if not isinstance(messages, list):
        raise InvalidRequest({"messages": "a list of messages"})
    for message in reversed(messages):
        if isinstance(message, dict) and message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, list):
                content = "\n".join(
                    p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text"
                )
            if isinstance(content, str) and content.strip() and not unstorable(content):
                return content
            break
    raise InvalidRequest({"messages": "the last user message must have text"})


def decision_of(resume: Any) -> tuple[bool, str]:
    """``resume`` entries as one decision on the waiting run's calls: approved when every entry
    is ``resolved`` with a payload that does not refuse (``false``, ``{"approved": false}``,
    ``"deny"``); the reason a payload gives."""
    if not isinstance(resume, list) or not resume:
        raise InvalidRequest({"resume": "a list of {interruptId, status, payload}"})
    approved, reason = True, ""
    for entry in resume:
        if not isinstance(entry, dict) or entry.get("status") not in ("resolved", "cancelled"):
            raise InvalidRequest({"resume": "each entry needs status resolved or cancelled"})
        payload = entry.get("payload")
        if isinstance(payload, dict):
            reason = str(payload.get("reason") or reason)
            payload = payload.get("approved", True)
        refused = payload is False or (isinstance(payload, str) and payload.lower() in ("deny", "reject", "no"))
        approved = approved and entry["status"] == "resolved" and not refused
    if unstorable(reason) or len(reason) > 2000:
        raise InvalidRequest({"resume": "the reason must be text of at most 2,000 characters"})
    return approved, reason


class AgUiView(APIView):
    authentication_classes = [TokenAuthentication, BearerAuthentication, SessionAuthentication]
    permission_classes = [IsAuthenticated]
    parser_classes = [JSONParser]
    renderer_classes = [JSONRenderer]
    content_negotiation_class = JSONErrors
    schema = None
    runtime = AgentRuntime()

    def get_exception_handler(self) -> Any:
        return exception_handler

    def body(self, request: Request) -> dict[str, Any]:
        try:
            data = request.data
        except ParseError as exc:
            raise InvalidRequest({"body": "not JSON"}) from exc
        if not isinstance(data, dict):
            raise InvalidRequest({"body": "expected a RunAgentInput object"})
        return data

    def spend(self, request: Request, action: admission.Action) -> None:
        refused = admission.take(request, action)
        if refused is not None:
            raise answers.Refused(answers.too_many(refused.detail, int(refused.wait)))

    def allowed(self, action: policy.Action, subject: AgentRun | Thread | None) -> None:
        refused = answers.refusal(policy.verdict(self.request.user, action, subject), action)
        if refused is not None:
            raise answers.Refused(refused)


class RunView(AgUiView):
    """Start, resume or reattach to a run of the saved agent ``name`` and stream it."""

    def post(self, request: Request, name: str) -> StreamingHttpResponse:
        data = self.body(request)
        thread_key, client_run = _string(data, "threadId"), _string(data, "runId")
        user = request.user
        cursor = Cursor.parse(request.META.get("HTTP_LAST_EVENT_ID", ""))
        existing = claims.run_of(user, client_run)
        if existing is not None:
            run = policy.visible_runs(user).filter(pk=existing).first()
            self.allowed(policy.Action.STREAM, run)
            return self.stream(thread_key, client_run, existing, cursor, snapshot=True)
        if not policy.may_see_agents(user) or not Agent.objects.filter(name=name).exists():
            raise AgentNotFound(name)
        resuming = data.get("resume") is not None
        run_request = (
            None
            if resuming
            else RunRequest.from_mapping({"agent": name, "prompt": last_user_text(data.get("messages"))})
        )
        # 403 for the agent or its connection, and 422 for the request, before a thread is created
        if run_request is not None:
            self.runtime.check_use(run_request, owner=user)
            refusal = policy.provider_refusal(run_request.provider)
            if refusal is not None:
                raise InvalidRequest({"provider": refusal})
        else:
            policy.check_use(user, name)
        thread = self.thread(thread_key)
        self.spend(request, admission.Action.CREATE)
        if resuming:
            run_id, after = self.resume(thread, client_run, data["resume"])
            return self.stream(thread_key, client_run, run_id, cursor or Cursor(after), snapshot=False)
        assert run_request is not None
        run_id, _ = claims.start(
            self.runtime, user, client_run, lambda: self.runtime.post(thread.pk, run_request, owner=user)
        )
        return self.stream(thread_key, client_run, run_id, cursor, snapshot=False)

    def thread(self, key: str) -> Thread:
        """The caller's thread ``key`` (a UUID), created when nobody has it."""
        try:
            pk = threads.parse_thread_id(key)
        except KindedError:
            raise InvalidRequest({"threadId": "a UUID (HttpAgent's default)"}) from None
        user: Any = self.request.user  # authenticated (IsAuthenticated)
        thread = policy.visible_threads(user).filter(pk=pk).first()
        if thread is None:
            with transaction.atomic():
                thread, created = Thread.objects.get_or_create(pk=pk, defaults={"owner": user})
            if not created:
                raise answers.Refused(answers.Answer(404, {"detail": answers.THREAD_NOT_FOUND}))
        self.allowed(policy.Action.POST_MESSAGE, thread)
        return thread

    def resume(self, thread: Thread, client_run: str, resume: Any) -> tuple[Any, int]:
        """Approve or deny the thread's waiting run; the run and its last step before it."""
        approved, reason = decision_of(resume)
        waiting = thread.runs.order_by("-thread_position").first()
        if waiting is None or waiting.status != RunStatus.WAITING_FOR_APPROVAL:
            raise ApprovalNotPending(waiting.pk if waiting else thread.pk, waiting.status if waiting else "")
        self.allowed(policy.Action.APPROVE, waiting)
        last = waiting.events.order_by("-sequence").values_list("sequence", flat=True).first()

        def approve() -> Any:
            self.runtime.approve(waiting.pk, approved, by=self.request.user, queued=True, reason=reason)
            return waiting.pk

        run_id, _ = claims.start(self.runtime, self.request.user, client_run, approve)
        return run_id, -1 if last is None else last

    def stream(
        self, thread_key: str, client_run: str, run_id: Any, cursor: Cursor | None, *, snapshot: bool
    ) -> StreamingHttpResponse:
        slot = admission.hold(admission.Kind.STREAM, self.request.user.pk)
        if isinstance(slot, admission.SlotRefused):
            raise answers.Refused(answers.too_many(slot.detail, RETRY_AFTER_SECONDS))
        content = frames(run_id, thread_key, client_run, cursor, snapshot=snapshot and cursor is None)
        response = StreamingHttpResponse(_released(slot, content), content_type="text/event-stream; charset=utf-8")
        response["Cache-Control"] = "no-cache, no-transform"
        response["X-Accel-Buffering"] = "no"
        return response


def _released(slot: admission.Slot, content: Iterator[str]) -> Iterator[str]:
    try:
        yield from content
    finally:
        slot.release()


class CancelView(AgUiView):
    """The client's Stop for its ``runId`` (or one of our run ids): a cancel, source ``ag-ui``;
    202 ``pending`` when the run does not exist yet (it is cancelled as it starts)."""

    def post(self, request: Request, run_id: str) -> Response:
        if len(run_id) > MAX_ID_CHARS:
            raise InvalidRequest({"runId": f"at most {MAX_ID_CHARS} characters"})
        self.spend(request, admission.Action.CANCEL)
        ours = claims.run_of(request.user, run_id)
        if ours is None:
            ours = self.our_run(run_id)
        if ours is not None:
            self.allowed(policy.Action.CANCEL, policy.visible_runs(request.user).filter(pk=ours).first())
        result = claims.stop(self.runtime, request.user, run_id, ours)
        if result is None:
            return Response({"runId": run_id, "status": "pending"}, status=202)
        row = AgentRun.objects.get(pk=result.run_id)
        return Response({"runId": run_id, "outcome": str(result.outcome), "status": row.status})

    def our_run(self, run_id: str) -> Any:
        """One of our run ids the caller can see (a Stop from a client that got it from us)."""
        try:
            pk = parse_run_id(run_id)
        except KindedError:
            return None
        if not policy.visible_runs(self.request.user).filter(pk=pk).exists():
            return None
        return pk
