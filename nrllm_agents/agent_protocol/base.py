"""What every protocol view shares: the SDKs' credentials, the protocol's error statuses, and
the lookups of threads and runs through the policy.

Credentials are the REST API's: a DRF token, sent by the SDKs' ``api_key`` as ``x-api-key``,
or in their ``headers`` as ``Authorization: Token <key>`` (or ``Bearer <key>``); else the
session. Errors are ``http.answers``'s, answered as the SDKs expect: a bad body is 422 (their
``UnprocessableEntityError``), not 400; 404, 409 and 429 keep their status.
"""

from __future__ import annotations

from typing import Any

from rest_framework.authentication import SessionAuthentication, TokenAuthentication
from rest_framework.negotiation import BaseContentNegotiation
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.throttling import BaseThrottle

from .. import admission
from ..access import policy
from ..api.base import RunAPIView
from ..api.errors import exception_handler as api_exception_handler
from ..api.throttling import RunRateThrottle
from ..domain.errors import Kind, KindedError
from ..http import answers
from ..models import AgentRun, Thread
from ..runtime import threads
from ..runtime.agent_runtime import parse_run_id

RUN_NOT_FOUND = "Run not found."


class ApiKeyAuthentication(TokenAuthentication):
    """A DRF token in ``x-api-key`` (what the SDKs' ``api_key`` sends)."""

    def authenticate(self, request: Request) -> tuple[Any, Any] | None:
        key = request.META.get("HTTP_X_API_KEY", "").strip()
        return self.authenticate_credentials(key) if key else None

    def authenticate_header(self, request: Request) -> str:
        return "x-api-key"


class BearerAuthentication(TokenAuthentication):
    """A DRF token as ``Authorization: Bearer <key>``."""

    keyword = "Bearer"


class JSONAlways(BaseContentNegotiation):
    """JSON whatever ``Accept`` says: a stream's ``Accept: text/event-stream`` is answered by
    the stream itself, and its errors (404, 409, 422, 429) are JSON as the SDKs read them."""

    def select_parser(self, request: Request, parsers: Any) -> Any:
        return parsers[0] if parsers else None

    def select_renderer(self, request: Request, renderers: Any, format_suffix: str | None = None) -> Any:
        return renderers[0], renderers[0].media_type


class ProtocolRunNotFound(KindedError, LookupError):
    """A run the protocol does not show: unknown, hidden, of another thread, rolled back."""

    kind = Kind.NOT_FOUND

    def detail(self) -> str:
        return RUN_NOT_FOUND


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """The API's handler, with a bad body as 422 and every error body carrying ``detail``."""
    response = api_exception_handler(exc, context)
    if response is not None and response.status_code == 400:
        response.status_code = 422
        if isinstance(response.data, dict) and "detail" not in response.data:
            first = next(iter(response.data.items()), ("body", ["invalid"]))
            response.data = {"detail": f"{first[0]}: {first[1][0] if first[1] else 'invalid'}", "errors": response.data}
    return response


class ProtocolView(RunAPIView):
    """A protocol endpoint: the API's parsers, policy and limits, the protocol's errors."""

    authentication_classes = [ApiKeyAuthentication, TokenAuthentication, BearerAuthentication, SessionAuthentication]
    content_negotiation_class = JSONAlways
    schema = None  # described by its own document (``openapi``), not the REST API's
    renderer_classes = [JSONRenderer]
    throttle: dict[str, admission.Action] = {}  # handler name -> the rate limit it spends

    def get_exception_handler(self) -> Any:
        return exception_handler

    def get_throttles(self) -> list[BaseThrottle]:
        action = self.throttle.get(getattr(self, "handler_name", ""))
        return [RunRateThrottle(action)] if action is not None else []

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        handler = getattr(self, request.method.lower(), None) if request.method else None
        self.handler_name = getattr(handler, "__name__", "")
        super().initial(request, *args, **kwargs)

    def get_thread(self, thread_id: str, action: policy.Action = policy.Action.SEE) -> Thread:
        """The thread if the caller may ``action`` it: 404 hidden or deleted, 403 forbidden."""
        pk = threads.parse_thread_id(thread_id)
        thread = policy.visible_threads(self.request.user).filter(pk=pk, hidden_from_protocol=False).first()
        refused = answers.refusal(
            policy.verdict(self.request.user, action, thread), action, not_found=answers.THREAD_NOT_FOUND
        )
        if refused is not None:
            raise answers.Refused(refused)
        assert thread is not None
        return thread

    def get_protocol_run(self, thread: Thread, run_id: str, action: policy.Action = policy.Action.SEE) -> AgentRun:
        """A run of ``thread`` the protocol shows, if the caller may ``action`` it."""
        try:
            pk = parse_run_id(run_id)
        except KindedError:
            raise ProtocolRunNotFound(run_id) from None
        run = (
            policy.visible_runs(self.request.user)
            .filter(pk=pk, thread=thread, rolled_back=False, hidden_from_protocol=False)
            .first()
        )
        refused = answers.refusal(policy.verdict(self.request.user, action, run), action, not_found=RUN_NOT_FOUND)
        if refused is not None:
            raise answers.Refused(refused)
        assert run is not None
        return run
