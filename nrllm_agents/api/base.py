"""What every view of the REST API shares: auth, parsers, throttles, the run lookup the policy
gates, pagination, and the checks on a body before the runtime sees it.

A refusal or a domain error is not answered here: it propagates to the API's exception handler
(``errors``), which asks ``http.answers`` like every other surface.
"""

from __future__ import annotations

from typing import Any

from django.db.models import Prefetch, QuerySet
from drf_spectacular.openapi import AutoSchema
from rest_framework.authentication import SessionAuthentication, TokenAuthentication
from rest_framework.exceptions import Throttled, ValidationError
from rest_framework.pagination import PageNumberPagination
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.schemas.inspectors import ViewInspector
from rest_framework.throttling import BaseThrottle
from rest_framework.views import APIView

from .. import admission
from ..access import policy
from ..http import answers
from ..models import AgentRun
from ..runtime.agent_runtime import AgentRuntime, parse_run_id
from ..validation.run_request import UNSTORABLE, unstorable
from . import responses as r
from .errors import exception_handler
from .fields import positive_int
from .parsers import BoundedJSONParser
from .throttling import RunRateThrottle


def with_children(runs: QuerySet[AgentRun], user: Any) -> QuerySet[AgentRun]:
    """``runs`` with the forks of each that ``user`` may see, prefetched as ``visible_children``."""
    children = policy.visible_runs(user).select_related(None).only("id", "parent_id").order_by("created_at")
    return runs.prefetch_related(Prefetch("children", queryset=children, to_attr="visible_children"))


def rejectunstorable(data: dict[str, Any]) -> None:
    """Reject NUL and lone surrogate characters anywhere in a body the runtime stores as JSON.

    PostgreSQL cannot store either (jsonb and text refuse NUL; UTF-8 cannot encode a lone
    surrogate), so they are input errors here rather than server errors later.
    """
    errors = {
        ("non_field_errors" if unstorable(key) else key): [UNSTORABLE]
        for key, value in data.items()
        if unstorable(key) or unstorable(value)
    }
    if errors:
        raise ValidationError(errors)


def refuse_provider(provider: str) -> None:
    """A 400 naming the field when users may not start runs on ``provider`` (``policy``)."""
    refusal = policy.provider_refusal(provider)
    if refusal is not None:
        raise ValidationError({"provider": [refusal]})


class SyncCapacity(Throttled):
    """429: the caller (or this process) already executes as many sync runs as allowed."""

    def __init__(self, refused: admission.SlotRefused) -> None:
        super().__init__(wait=1, detail=refused.detail)


def sync_slot(request: Request) -> admission.Slot:
    """A slot for a run executed in this request (``mode: sync``, a sync approval), else 429."""
    slot = admission.hold(admission.Kind.SYNC, request.user.pk)
    if isinstance(slot, admission.SlotRefused):
        raise SyncCapacity(slot)
    return slot


def checked_body(request: Request, shape: type[Any]) -> dict[str, Any]:
    """The JSON object body, once storable and of the serializer ``shape``; else a 400."""
    data = request.data
    if not isinstance(data, dict):
        raise ValidationError({"non_field_errors": ["expected a JSON object"]})
    rejectunstorable(data)
    shape(data=data).is_valid(raise_exception=True)
    return dict(data)


class RunAPIView(APIView):
    """Common ground: JSON bodies; token then session auth (so an anonymous caller gets 401
    with a ``WWW-Authenticate: Token`` challenge); flat 400 bodies; throttles on POST, and on a GET
    that names its scope."""

    parser_classes = [BoundedJSONParser]
    authentication_classes = [TokenAuthentication, SessionAuthentication]
    # Stated here, not left to the host project's REST_FRAMEWORK defaults: the API needs a
    # signed-in caller whatever DEFAULT_PERMISSION_CLASSES says.
    permission_classes = [IsAuthenticated]
    # likewise the schema inspector: the host's DEFAULT_SCHEMA_CLASS may be DRF's own
    schema: ViewInspector | None = AutoSchema()
    post_throttle_scope: admission.Action | None = None
    get_throttle_scope: admission.Action | None = None
    runtime = AgentRuntime()

    def get_exception_handler(self) -> Any:
        return exception_handler

    def get_throttles(self) -> list[BaseThrottle]:
        if self.request.method == "POST" and self.post_throttle_scope:
            return [RunRateThrottle(self.post_throttle_scope)]
        if self.request.method == "GET" and self.get_throttle_scope:
            return [RunRateThrottle(self.get_throttle_scope)]
        return []

    def get_run(self, run_id: str, action: policy.Action = policy.Action.SEE) -> AgentRun:
        """The run with this id if the policy lets the caller ``action`` it.

        404 when the caller may not see it (unknown, not visible and malformed look the same),
        403 when they see it but may not act on it.
        """
        pk = parse_run_id(run_id)  # InvalidRunId: answered 404 like an unknown run
        run = with_children(policy.visible_runs(self.request.user), self.request.user).filter(pk=pk).first()
        refused = answers.refusal(
            policy.verdict(self.request.user, action, run), action, not_found=answers.RUN_NOT_FOUND
        )
        if refused is not None:
            raise answers.Refused(refused)
        assert run is not None
        return run

    def fresh(self, run_id: Any) -> dict[str, Any]:
        """The run as it is now (after the runtime acted on it)."""
        return r.run_representation(
            with_children(policy.visible_runs(self.request.user), self.request.user).get(pk=run_id)
        )


class RunPagination(PageNumberPagination):
    """Page numbers; a malformed ``page`` or ``page_size`` is a 400, not silently the default."""

    page_size = 50  # not the host's PAGE_SIZE, which is None (no paging) unless it sets one
    page_size_query_param = "page_size"
    max_page_size = 200
    max_page = 10**9
    last_page_strings = ()

    def get_page_number(self, request: Request, paginator: Any) -> int:
        raw = request.query_params.get(self.page_query_param)
        return positive_int(raw, name=self.page_query_param, maximum=self.max_page) or 1

    def get_page_size(self, request: Request) -> int | None:
        raw = request.query_params.get(self.page_size_query_param)
        return positive_int(raw, name=self.page_size_query_param, maximum=self.max_page_size) or self.page_size

    def get_schema_operation_parameters(self, view: Any) -> list[dict[str, Any]]:
        parameters = super().get_schema_operation_parameters(view)
        bounds = {self.page_query_param: self.max_page, self.page_size_query_param: self.max_page_size}
        for parameter in parameters:
            parameter["schema"].update(minimum=1, maximum=bounds[parameter["name"]])
        return parameters
