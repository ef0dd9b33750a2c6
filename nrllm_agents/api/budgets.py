"""``/api/budgets/``: the shared budgets with their use now (spent, reserved, left, reset time).

Everyone reads the budgets covering their own runs (theirs, their groups', everyone's); staff
holding the budget permissions read every budget (``view_``), add, change and delete them
(``policy.may_configure``, as for connections; ``catalog.budgets``).
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse
from rest_framework import serializers, status
from rest_framework.exceptions import NotFound, PermissionDenied
from rest_framework.request import Request
from rest_framework.response import Response

from ..access import policy
from ..catalog import budgets
from ..models import Budget, BudgetScope, BudgetWindow
from .base import RunAPIView, checked_body
from .fields import StrictCharField
from .responses import ErrorSerializer
from .schema import AUTH_ERRORS, BAD_REQUEST, extend_schema

ID = OpenApiParameter(
    "id", OpenApiTypes.STR, OpenApiParameter.PATH, description="The budget's id.", pattern=r"^[0-9]{1,18}$"
)
FORBIDDEN = "You may not do this to budgets: it takes staff with the budget permission."
NOT_FOUND: dict[int, Any] = {404: OpenApiResponse(ErrorSerializer, "No budget with this id.")}


class BudgetWriteSerializer(serializers.Serializer[Any]):
    scope = serializers.ChoiceField(BudgetScope.choices)
    subject = StrictCharField(
        required=False, allow_blank=True, max_length=150, help_text="The username, group or agent name."
    )
    window = serializers.ChoiceField(BudgetWindow.choices)
    max_cost = StrictCharField(required=False, allow_blank=True, max_length=40, help_text="A decimal amount.")
    max_tokens = serializers.IntegerField(required=False, allow_null=True, min_value=0)
    max_runs = serializers.IntegerField(required=False, allow_null=True, min_value=0)


class BudgetSerializer(serializers.Serializer[Any]):
    id = serializers.IntegerField()
    scope = serializers.ChoiceField(BudgetScope.choices)
    subject = serializers.CharField()
    window = serializers.ChoiceField(BudgetWindow.choices)
    currency = serializers.CharField()
    max_cost = serializers.CharField(allow_null=True)
    max_tokens = serializers.IntegerField(allow_null=True)
    max_runs = serializers.IntegerField(allow_null=True)
    spent_cost = serializers.CharField()
    spent_tokens = serializers.IntegerField()
    runs = serializers.IntegerField()
    reserved_cost = serializers.CharField()
    reserved_tokens = serializers.IntegerField()
    left_cost = serializers.CharField(allow_null=True)
    left_tokens = serializers.IntegerField(allow_null=True)
    left_runs = serializers.IntegerField(allow_null=True)
    resets_at = serializers.DateTimeField(allow_null=True)


def _allow(request: Request, *actions: policy.Setup) -> None:
    """Refuse unless the caller may do one of ``actions`` to budgets."""
    if not any(policy.may_configure(request.user, action, "budget") for action in actions):
        raise PermissionDenied(FORBIDDEN)


class BudgetListView(RunAPIView):
    @extend_schema(
        operation_id="budgets_list",
        summary="The budgets covering your runs (staff: every budget), with their use now",
        responses={200: BudgetSerializer(many=True), **AUTH_ERRORS, **BAD_REQUEST},
    )
    def get(self, request: Request) -> Response:
        return Response([budgets.as_dict(b) for b in budgets.visible_to(request.user)])

    @extend_schema(
        operation_id="budgets_set",
        summary="Create or change the budget of a subject for a window (staff: add or change permission)",
        request=BudgetWriteSerializer,
        responses={200: BudgetSerializer, 201: BudgetSerializer, **BAD_REQUEST, **AUTH_ERRORS},
    )
    def post(self, request: Request) -> Response:
        _allow(request, policy.Setup.ADD, policy.Setup.CHANGE)  # before any subject is looked up
        body = checked_body(request, BudgetWriteSerializer)
        subject = body.get("subject") or None
        found = budgets.existing(body["scope"], subject, body["window"])
        _allow(request, policy.Setup.ADD if found is None else policy.Setup.CHANGE)
        budget, created = budgets.set_budget(
            body["scope"],
            subject,
            body["window"],
            max_cost=body.get("max_cost"),
            max_tokens=body.get("max_tokens"),
            max_runs=body.get("max_runs"),
        )
        return Response(budgets.as_dict(budget), status=status.HTTP_201_CREATED if created else status.HTTP_200_OK)


class BudgetDetailView(RunAPIView):
    def _row(self, id: str) -> Budget:
        well_formed = id.isascii() and id.isdigit() and len(id) <= 18
        row = budgets.visible_to(self.request.user).filter(pk=int(id)).first() if well_formed else None
        if row is None:
            raise NotFound("No budget with this id.")
        return row

    @extend_schema(
        operation_id="budgets_retrieve",
        summary="A budget with its use now",
        parameters=[ID],
        responses={200: BudgetSerializer, **AUTH_ERRORS, **NOT_FOUND},
    )
    def get(self, request: Request, id: str) -> Response:
        return Response(budgets.as_dict(self._row(id)))

    @extend_schema(
        operation_id="budgets_destroy",
        summary="Delete a budget (staff: delete permission)",
        parameters=[ID],
        responses={204: None, **AUTH_ERRORS, **NOT_FOUND},
    )
    def delete(self, request: Request, id: str) -> Response:
        row = self._row(id)
        _allow(request, policy.Setup.DELETE)
        row.delete()
        return Response(status=status.HTTP_204_NO_CONTENT)
