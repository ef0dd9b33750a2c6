"""``/api/agents/``: named, versioned agent definitions that runs and forks start from.

Reading is for every signed-in user (``policy.may_see_agents``: they start runs from them);
adding, editing (a new version) and deleting are for staff holding the model's permission
(``policy.may_configure``). Editing never changes a version: runs keep what they ran with.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse
from rest_framework import serializers, status
from rest_framework.exceptions import NotFound, PermissionDenied, ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from ..access import policy
from ..catalog import agents
from ..models import Agent
from .base import RunAPIView, checked_body
from .fields import StrictCharField
from .responses import ErrorSerializer
from .schema import AUTH_ERRORS, BAD_REQUEST, extend_schema

NAME = OpenApiParameter(
    "name", OpenApiTypes.STR, OpenApiParameter.PATH, description="The agent's name.", pattern=r"^[-a-zA-Z0-9_]{1,100}$"
)
AGENT_NOT_FOUND = "No agent with this name."
FORBIDDEN = "You may not change agents: it takes staff with the agent permission."


class AgentWriteSerializer(serializers.Serializer[Any]):
    """The body of a create (with ``name``) or an edit: the definition of the new version."""

    name = StrictCharField(max_length=100, help_text="Letters, digits, - and _ (create only).")
    description = StrictCharField(required=False, allow_blank=True, max_length=agents.MAX_DESCRIPTION_CHARS)
    definition = serializers.DictField(
        help_text="Run request fields the agent sets: system, connection, provider, model, tools, "
        "max_iterations, on_deny, deadline_seconds, max_total_tokens, max_cost. A run's own fields win."
    )


class AgentEditSerializer(AgentWriteSerializer):
    name = None  # type: ignore[assignment]


class AgentVersionSerializer(serializers.Serializer[Any]):
    version = serializers.IntegerField()
    definition = serializers.DictField()
    created_at = serializers.DateTimeField()
    created_by = serializers.CharField(allow_null=True)


class AgentSerializer(serializers.Serializer[Any]):
    name = serializers.CharField()
    description = serializers.CharField(allow_blank=True)
    version = serializers.IntegerField(allow_null=True, help_text="The latest version.")
    definition = serializers.DictField(help_text="The latest version's definition.")
    updated_at = serializers.DateTimeField()
    versions = AgentVersionSerializer(many=True, required=False, help_text="Every version, newest first (detail).")


NOT_FOUND_AGENT: dict[int, Any] = {404: OpenApiResponse(ErrorSerializer, "No agent with this name.")}


def _invalid(exc: agents.InvalidAgent) -> ValidationError:
    return ValidationError({field: [message] for field, message in exc.errors.items()})


class AgentListView(RunAPIView):
    @extend_schema(
        operation_id="agents_list",
        summary="List agents",
        description="The saved agents the caller may start runs from: those open to every signed-in user, and "
        "those that name the caller or one of their groups (superusers and staff who may change agents: all).",
        responses={200: AgentSerializer(many=True), **AUTH_ERRORS, **BAD_REQUEST},
    )
    def get(self, request: Request) -> Response:
        if not policy.may_see_agents(request.user):
            raise PermissionDenied()
        usable = policy.usable_agents(request.user)  # only those the caller may start runs from
        return Response([agents.public_dict(a) for a in usable.prefetch_related("versions")])

    @extend_schema(
        operation_id="agents_create",
        summary="Create an agent (its version 1)",
        request=AgentWriteSerializer,
        responses={201: AgentSerializer, **BAD_REQUEST, **AUTH_ERRORS},
    )
    def post(self, request: Request) -> Response:
        if not policy.may_configure(request.user, policy.Setup.ADD, "agent"):
            raise PermissionDenied(FORBIDDEN)
        body = checked_body(request, AgentWriteSerializer)
        try:
            version = agents.save(
                body["name"], body["definition"], description=body.get("description"), by=request.user, create=True
            )
        except agents.InvalidAgent as exc:
            raise _invalid(exc) from None
        return Response(agents.public_dict(version.agent, versions=True), status=status.HTTP_201_CREATED)


class AgentDetailView(RunAPIView):
    def _agent(self, name: str, *, usable: bool = False) -> Agent:
        """The agent named ``name``; with ``usable``, only one the caller may start runs from (a
        read shows what the list shows: another team's agent is not found)."""
        if not policy.may_see_agents(self.request.user):
            raise PermissionDenied()
        rows = policy.usable_agents(self.request.user) if usable else Agent.objects.all()
        agent = rows.filter(name=name).first()
        if agent is None:
            raise NotFound(AGENT_NOT_FOUND)
        return agent

    @extend_schema(
        operation_id="agents_retrieve",
        summary="An agent and all its versions",
        parameters=[NAME],
        responses={200: AgentSerializer, **AUTH_ERRORS, **NOT_FOUND_AGENT, **BAD_REQUEST},
    )
    def get(self, request: Request, name: str) -> Response:
        return Response(agents.public_dict(self._agent(name, usable=True), versions=True))

    @extend_schema(
        operation_id="agents_edit",
        summary="Edit an agent: add a version",
        parameters=[NAME],
        request=AgentEditSerializer,
        description="Adds a version with this definition (the same definition as the latest adds none). "
        "Runs started from earlier versions keep what they recorded.",
        responses={200: AgentSerializer, **BAD_REQUEST, **AUTH_ERRORS, **NOT_FOUND_AGENT},
    )
    def put(self, request: Request, name: str) -> Response:
        agent = self._agent(name)
        if not policy.may_configure(request.user, policy.Setup.CHANGE, "agent"):
            raise PermissionDenied(FORBIDDEN)
        body = checked_body(request, AgentEditSerializer)
        try:
            agents.save(agent.name, body["definition"], description=body.get("description"), by=request.user)
        except agents.InvalidAgent as exc:
            raise _invalid(exc) from None
        return Response(agents.public_dict(agent, versions=True))

    @extend_schema(
        operation_id="agents_destroy",
        summary="Delete an agent",
        parameters=[NAME],
        description="Its runs keep their snapshot of the version they ran.",
        responses={204: None, **AUTH_ERRORS, **NOT_FOUND_AGENT, **BAD_REQUEST},
    )
    def delete(self, request: Request, name: str) -> Response:
        agent = self._agent(name)
        if not policy.may_configure(request.user, policy.Setup.DELETE, "agent"):
            raise PermissionDenied(FORBIDDEN)
        agent.delete()
        return Response(status=status.HTTP_204_NO_CONTENT)
