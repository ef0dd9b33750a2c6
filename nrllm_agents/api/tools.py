"""``GET /api/tools/``: every tool a run can be offered, as ``manage.py agent_tools --json`` lists them."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiResponse
from rest_framework import serializers
from rest_framework.exceptions import PermissionDenied
from rest_framework.request import Request
from rest_framework.response import Response

from ..access import policy
from ..catalog import registry
from .base import RunAPIView
from .schema import AUTH_ERRORS, THROTTLED, extend_schema
from .throttling import TOOLS_SCOPE


class OfferedToolSerializer(serializers.Serializer[Any]):
    name = serializers.CharField(help_text="The name a run offers it by (`tools: [...]`, `--tool NAME`).")
    description = serializers.CharField()
    # (DRF's metaclass takes declared fields off the class; the stubs see Field.source shadowed)
    source = serializers.ChoiceField(["built-in", "settings", "app", "mcp"])  # type: ignore[assignment]
    server = serializers.CharField(allow_null=True, help_text="The MCP server it comes from (else null).")
    requires_approval = serializers.BooleanField(help_text="A call waits for a human decision.")
    idempotent = serializers.BooleanField(help_text="May be repeated after a lost worker.")
    transactional = serializers.BooleanField(
        help_text="Its database writes commit with its step, or not at all: made exactly once."
    )


class ToolListSerializer(serializers.Serializer[Any]):
    tools = OfferedToolSerializer(many=True)
    unavailable = serializers.DictField(
        child=serializers.CharField(), help_text="MCP servers that could not be listed, and why."
    )


class ToolListView(RunAPIView):
    get_throttle_scope = TOOLS_SCOPE

    @extend_schema(
        operation_id="tools_list",
        summary="List the tools a run can be offered",
        description="Built-in tools, those of `NRLLM_AGENTS['TOOLS']`, the typed tools of the apps' `agent_tools` "
        "modules and those of the configured MCP "
        "servers: the web process's last listing of each, refreshed in the background (no request waits on "
        "a server). `unavailable` names each MCP server that could not be listed (or not yet), and why; a "
        "server that broke after a listing keeps its tools here, and a call to one fails at once.",
        responses={200: OpenApiResponse(ToolListSerializer), **THROTTLED, **AUTH_ERRORS},
    )
    def get(self, request: Request) -> Response:
        if not policy.may_list_tools(request.user):
            raise PermissionDenied()
        tools, broken = registry.offered_tools()
        return Response({"tools": tools, "unavailable": broken})
