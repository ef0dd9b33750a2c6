"""The admin's operations page (``agentrun/operations/``) and the runs list's "health" filter.

The page answers the on-call questions at a glance: how many runs are in each status, which
are stuck (see ``observability.operations``), when the reaper last ran and what it did, and
how deep the queue is. Every figure links to the runs list filtered to exactly those runs.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse

from ..models import AgentRun
from ..observability import operations


class HealthFilter(admin.SimpleListFilter):
    """Runs that need an operator's (or the reaper's) attention."""

    title = "health"
    parameter_name = "health"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [
            ("lease_expired", "lease expired (worker lost)"),
            ("unacknowledged_cancel", "cancel not acknowledged (lease expired)"),
            ("queued_without_job", "queued with no job (RQ)"),
        ]

    def queryset(self, request: HttpRequest, queryset: QuerySet[AgentRun]) -> QuerySet[AgentRun]:
        value = self.value()
        if value == "lease_expired":
            return queryset.filter(pk__in=operations.lease_expired().values("pk"))
        if value == "unacknowledged_cancel":
            return queryset.filter(pk__in=operations.unacknowledged_cancel().values("pk"))
        if value == "queued_without_job":
            try:
                ids, _ = operations.queued_without_job()
            except Exception:  # Redis unreachable: show nothing rather than fail the list
                ids = []
            return queryset.filter(pk__in=ids)
        return queryset


def operations_page(model_admin: Any, request: HttpRequest) -> HttpResponse:
    """The page; staff with the view permission on runs (wrapped by ``admin_view``)."""
    from django.core.exceptions import PermissionDenied

    from ..executors import dispatch

    if not model_admin.has_view_permission(request):
        raise PermissionDenied
    context = {
        **model_admin.admin_site.each_context(request),
        "opts": model_admin.opts,
        "title": "Operations",
        "overview": operations.overview(),
        "uses_rq": dispatch.uses_rq(),
        "changelist": model_admin._url("changelist"),
    }
    return TemplateResponse(request, "admin/nrllm_agents/agentrun/operations.html", context)
