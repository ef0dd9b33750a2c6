"""What every view of the REST API shares: auth, parsers, throttles, the run lookup the policy
gates, pagination, and the checks on a body before the runtime sees it.

A refusal or a domain error is not answered here: it propagates to the API's exception handler
(``errors``), which asks ``http.answers`` like every other surface.
"""

from __future__ import annotations

from typing import Any

from django.db.models import Prefetch, Q, QuerySet
from drf_spectacular.openapi import AutoSchema
from rest_framework.authentication import SessionAuthentication, TokenAuthentication
from rest_framework.exceptions import NotFound, Throttled, ValidationError
from rest_framework.pagination import BasePagination
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.schemas.inspectors import ViewInspector
from rest_framework.throttling import BaseThrottle
from rest_framework.utils.urls import remove_query_param, replace_query_param
from rest_framework.views import APIView

from .. import admission
from ..access import policy
from ..http import answers
from ..models import AgentRun
from ..runtime.agent_runtime import AgentRuntime, parse_run_id
from ..validation.run_request import UNSTORABLE, unstorable
from . import keyset
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


class RunPagination(BasePagination):
    """Keyset pages of a list ordered newest first (``-<time>``, then ``-pk``).

    ``next`` and ``previous`` are ``?cursor=`` links: each page reads ``page_size`` rows from
    where the last one stopped, through the ordering's index, at any depth and any table size,
    and a run created meanwhile does not shift the pages. ``?page=N`` (the links of the
    numbered pages this API gave before) still answers, by offset; past the end it is a 404. No
    page counts the whole list: the body has ``next``, ``previous`` and ``results``.
    A malformed ``page``, ``page_size`` or ``cursor`` is a 400, not silently the default.
    """

    page_size = 50  # not the host's PAGE_SIZE, which is None (no paging) unless it sets one
    page_query_param = "page"
    page_size_query_param = "page_size"
    cursor_query_param = "cursor"
    max_page_size = 200
    max_page = 10**9

    def paginate_queryset(self, queryset: Any, request: Request, view: Any = None) -> list[Any]:  # a QuerySet
        self.request = request
        size = self.get_page_size(request)
        field = str(queryset.query.order_by[0]).lstrip("-")  # the view orders by ("-<time>", "-pk")
        raw = request.query_params.get(self.cursor_query_param)
        if raw is not None:
            value, pk, backwards = keyset.decode(raw, name=self.cursor_query_param)
            if backwards:  # the page before: ascending from the position, then turned around
                after = Q(**{f"{field}__gte": value}) & (Q(**{f"{field}__gt": value}) | Q(pk__gt=pk))
                rows = list(queryset.filter(after).reverse()[: size + 1])
                self.has_previous, self.has_next = len(rows) > size, True
                rows = rows[:size][::-1]
            else:  # ``field <= value`` alone is what the index range scan reads from
                before = Q(**{f"{field}__lte": value}) & (Q(**{f"{field}__lt": value}) | Q(pk__lt=pk))
                rows = list(queryset.filter(before)[: size + 1])
                self.has_previous, self.has_next = True, len(rows) > size
                rows = rows[:size]
        else:
            page = self.get_page_number(request)
            rows = list(queryset[(page - 1) * size : page * size + 1])
            if not rows and page > 1:
                raise NotFound("Invalid page.")
            self.has_previous, self.has_next = page > 1, len(rows) > size
            rows = rows[:size]
        self.field, self.rows = field, rows
        return rows

    def get_page_number(self, request: Request) -> int:
        raw = request.query_params.get(self.page_query_param)
        return positive_int(raw, name=self.page_query_param, maximum=self.max_page) or 1

    def get_page_size(self, request: Request) -> int:
        raw = request.query_params.get(self.page_size_query_param)
        return positive_int(raw, name=self.page_size_query_param, maximum=self.max_page_size) or self.page_size

    def _link(self, row: Any, backwards: bool) -> str:
        url = remove_query_param(self.request.build_absolute_uri(), self.page_query_param)
        cursor = keyset.encode(getattr(row, self.field), row.pk, backwards=backwards)
        return replace_query_param(url, self.cursor_query_param, cursor)

    def get_paginated_response(self, data: Any) -> Response:
        rows = self.rows
        return Response(
            {
                "next": self._link(rows[-1], backwards=False) if rows and self.has_next else None,
                "previous": self._link(rows[0], backwards=True) if rows and self.has_previous else None,
                "results": data,
            }
        )

    def get_paginated_response_schema(self, schema: dict[str, Any]) -> dict[str, Any]:
        link = {"type": "string", "nullable": True, "format": "uri"}
        return {
            "type": "object",
            "required": ["results"],
            "properties": {"next": link, "previous": link, "results": schema},
        }

    def get_schema_operation_parameters(self, view: Any) -> list[dict[str, Any]]:
        def parameter(name: str, description: str, schema: dict[str, Any]) -> dict[str, Any]:
            return {"name": name, "required": False, "in": "query", "description": description, "schema": schema}

        return [
            parameter(
                self.cursor_query_param, "The position of a page: from a `next` or `previous` link.", {"type": "string"}
            ),
            parameter(
                self.page_query_param,
                "A page number (by offset; the cursor links are faster deep in a long list).",
                {"type": "integer", "minimum": 1, "maximum": self.max_page},
            ),
            parameter(
                self.page_size_query_param,
                "Number of results to return per page.",
                {"type": "integer", "minimum": 1, "maximum": self.max_page_size},
            ),
        ]
