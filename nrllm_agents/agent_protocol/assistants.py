"""``/assistants``: each saved agent is an assistant, its name the ``assistant_id``."""

from __future__ import annotations

from typing import Any

from rest_framework.exceptions import PermissionDenied
from rest_framework.request import Request
from rest_framework.response import Response

from ..access import policy
from ..domain.errors import Kind, KindedError
from ..models import Agent
from . import shapes
from .base import ProtocolView
from .paging import page_of

INPUT_SCHEMA = {
    "type": "object",
    "properties": {"messages": {"type": "array", "items": {"type": "object"}}},
    "required": ["messages"],
}


class AssistantNotFound(KindedError, LookupError):
    """No saved agent with this name."""

    kind = Kind.NOT_FOUND

    def detail(self) -> str:
        return "Assistant not found."


def agent_named(user: Any, name: str, *, usable: bool = False) -> Agent:
    """The agent named ``name``; with ``usable``, only one ``user`` may start runs from (the reads:
    another team's assistant is not found, as the search leaves it out). A start asks for any
    agent, then the policy refuses it with a 403 that names it (``policy.check_use``)."""
    if not policy.may_see_agents(user):
        raise PermissionDenied()
    rows = policy.usable_agents(user) if usable else Agent.objects.all()
    agent = rows.filter(name=name).first() if isinstance(name, str) else None
    if agent is None:
        raise AssistantNotFound(name)
    return agent


class AssistantSearchView(ProtocolView):
    def post(self, request: Request) -> Response:
        if not policy.may_see_agents(request.user):
            raise PermissionDenied()
        body = request.data if isinstance(request.data, dict) else {}
        limit, offset = page_of(body)
        agents = policy.usable_agents(request.user).order_by("name")  # only those the caller may run
        if isinstance(body.get("name"), str):
            agents = agents.filter(name=body["name"])
        if body.get("graph_id") not in (None, shapes.GRAPH_ID):
            agents = agents.none()
        return Response([shapes.assistant(a) for a in agents[offset : offset + limit]])


class AssistantDetailView(ProtocolView):
    def get(self, request: Request, assistant_id: str) -> Response:
        return Response(shapes.assistant(agent_named(request.user, assistant_id, usable=True)))


class AssistantSchemasView(ProtocolView):
    def get(self, request: Request, assistant_id: str) -> Response:
        agent_named(request.user, assistant_id, usable=True)
        return Response(
            {
                "graph_id": shapes.GRAPH_ID,
                "input_schema": INPUT_SCHEMA,
                "output_schema": INPUT_SCHEMA,
                "state_schema": INPUT_SCHEMA,
                "config_schema": {"type": "object"},
                "context_schema": {"type": "object"},
            }
        )
