"""AG-UI's URLs (included under ``ag-ui/`` by ``nrllm_agents.urls``, or under any prefix)."""

from __future__ import annotations

from django.urls import path

from . import views

app_name = "nrllm_ag_ui"

urlpatterns = [
    path("agents/<str:name>/", views.RunView.as_view(), name="run"),
    path("runs/<str:run_id>/cancel/", views.CancelView.as_view(), name="cancel"),
]
