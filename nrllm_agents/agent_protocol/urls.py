"""The protocol's URLs (included under ``lg/`` by ``config/urls.py``, or under any prefix)."""

from __future__ import annotations

from django.urls import path

from . import assistants, control, openapi, runs, threads

app_name = "nrllm_lg"

RUN = "threads/<str:thread_id>/runs/<str:run_id>"

urlpatterns = [
    path("openapi.json", openapi.OpenAPIView.as_view(), name="openapi"),
    path("info", openapi.InfoView.as_view(), name="info"),
    path("assistants/search", assistants.AssistantSearchView.as_view(), name="assistant-search"),
    path("assistants/<str:assistant_id>", assistants.AssistantDetailView.as_view(), name="assistant-detail"),
    path("assistants/<str:assistant_id>/schemas", assistants.AssistantSchemasView.as_view(), name="assistant-schemas"),
    path("threads", threads.ThreadListView.as_view(), name="thread-list"),
    path("threads/search", threads.ThreadSearchView.as_view(), name="thread-search"),
    path("threads/<str:thread_id>", threads.ThreadDetailView.as_view(), name="thread-detail"),
    path("threads/<str:thread_id>/state", threads.ThreadStateView.as_view(), name="thread-state"),
    path("threads/<str:thread_id>/history", threads.ThreadHistoryView.as_view(), name="thread-history"),
    path("threads/<str:thread_id>/runs", runs.RunCreateView.as_view(), name="run-list"),
    path("threads/<str:thread_id>/runs/stream", runs.RunStreamView.as_view(), name="run-create-stream"),
    path("threads/<str:thread_id>/runs/wait", runs.RunWaitView.as_view(), name="run-wait"),
    path(RUN, runs.RunDetailView.as_view(), name="run-detail"),
    path(f"{RUN}/cancel", control.RunCancelView.as_view(), name="run-cancel"),
    path(f"{RUN}/join", runs.RunJoinView.as_view(), name="run-join"),
    path(f"{RUN}/stream", runs.RunJoinStreamView.as_view(), name="run-stream"),
    path("runs", runs.RunCreateView.as_view(), name="threadless-run"),
    path("runs/stream", runs.RunStreamView.as_view(), name="threadless-stream"),
    path("runs/wait", runs.RunWaitView.as_view(), name="threadless-wait"),
]
