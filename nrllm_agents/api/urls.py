"""URLs of the REST API (included under ``api/``) with its OpenAPI schema and offline docs.

``runs/<id>/stream/`` is the browser's server-sent event stream (``stream``): a plain Django
view, outside the schema, followed by the playground, the thread pages and the admin.
"""

from __future__ import annotations

from typing import Any

from django.templatetags.static import static
from django.urls import path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView
from rest_framework.authentication import SessionAuthentication, TokenAuthentication
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request

from . import agents, budgets, connections, forks, stream, threads, tools, views
from .schema import SCHEMA_SETTINGS, extend_schema

app_name = "nrllm_api"
AUTH = [TokenAuthentication, SessionAuthentication]


class SchemaView(SpectacularAPIView):
    """The schema. Its ``get`` is annotated again on drf-spectacular's inspector: the library's
    own annotation took the host's ``DEFAULT_SCHEMA_CLASS`` (DRF's, by default), and
    ``check --deploy``, which generates the host's schema, stopped at it (``drf_spectacular.E001``).
    (drf-spectacular ships no types: its ``get`` reads as untyped.)"""

    @extend_schema(exclude=True)
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Any:
        return super().get(request, *args, **kwargs)  # type: ignore[no-untyped-call]


class SwaggerView(SpectacularSwaggerSplitView):
    """The docs page from the sidecar's files (served by the host's staticfiles), whatever the
    host's SPECTACULAR_SETTINGS say: it works offline and loads nothing from a CDN. The split view
    serves Swagger UI's start script at ?script, not inline: the CSP runs no inline script. Its
    ``get`` is annotated on drf-spectacular's inspector, as ``SchemaView``'s."""

    title = SCHEMA_SETTINGS["TITLE"]

    @extend_schema(exclude=True)
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Any:
        return super().get(request, *args, **kwargs)  # type: ignore[no-untyped-call]

    @staticmethod
    def _swagger_ui_resource(filename: str) -> str:
        return static(f"drf_spectacular_sidecar/swagger-ui-dist/{filename}")

    @staticmethod
    def _swagger_ui_favicon() -> str:
        return static("drf_spectacular_sidecar/swagger-ui-dist/favicon-32x32.png")


urlpatterns = [
    path("runs/", views.RunListCreateView.as_view(), name="run-list"),
    # Before runs/<id>/, which would otherwise take "cancel" for an id.
    path("runs/cancel/", views.BulkCancelView.as_view(), name="run-bulk-cancel"),
    path("runs/<str:id>/", views.RunDetailView.as_view(), name="run-detail"),
    path("runs/<str:id>/cancel/", views.RunCancelView.as_view(), name="run-cancel"),
    path("runs/<str:id>/approve/", views.RunApproveView.as_view(), name="run-approve"),
    path("runs/<str:id>/resolve/", views.RunResolveView.as_view(), name="run-resolve"),
    path("runs/<str:id>/events/", views.RunEventsView.as_view(), name="run-events"),
    path("runs/<str:id>/fork/", forks.RunForkView.as_view(), name="run-fork"),
    path("runs/<uuid:run_id>/stream/", stream.run_stream, name="run-stream"),
    path("agents/", agents.AgentListView.as_view(), name="agent-list"),
    path("agents/<str:name>/", agents.AgentDetailView.as_view(), name="agent-detail"),
    path("connections/", connections.ConnectionListView.as_view(), name="connection-list"),
    path("connections/<str:name>/", connections.ConnectionDetailView.as_view(), name="connection-detail"),
    path("budgets/", budgets.BudgetListView.as_view(), name="budget-list"),
    path("budgets/<str:id>/", budgets.BudgetDetailView.as_view(), name="budget-detail"),
    path("tools/", tools.ToolListView.as_view(), name="tool-list"),
    path("threads/", threads.ThreadListCreateView.as_view(), name="thread-list"),
    path("threads/<str:id>/", threads.ThreadDetailView.as_view(), name="thread-detail"),
    path("threads/<str:id>/messages/", threads.ThreadMessageView.as_view(), name="thread-messages"),
    # Token first, as on every endpoint: an anonymous caller gets 401 with a challenge, not 403.
    path(
        "schema/",
        SchemaView.as_view(
            custom_settings=SCHEMA_SETTINGS, authentication_classes=AUTH, permission_classes=[IsAuthenticated]
        ),
        name="schema",
    ),
    path(
        "docs/",
        SwaggerView.as_view(
            url_name="nrllm_api:schema", authentication_classes=AUTH, permission_classes=[IsAuthenticated]
        ),
        name="docs",
    ),
]
