"""The playground's list of the user's runs: searched by prompt or id, filtered by status, paged."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django.core.paginator import Paginator
from django.db.models import Q
from django.http import HttpRequest

from ..models import AgentRun, RunStatus

PER_PAGE = 15
MAX_QUERY = 200


def recent_runs(request: HttpRequest) -> dict[str, Any]:
    """``recent`` (a page of the user's runs, newest first) and what the list's form shows.

    ``?q=`` matches words of the prompt or the start of a run id; ``?status=`` one status;
    ``?page=`` a page (out of range: the last one).
    """
    query = (request.GET.get("q") or "").strip()[:MAX_QUERY]
    status = request.GET.get("status") or ""
    runs = AgentRun.objects.filter(owner_id=request.user.pk)
    if query:
        runs = runs.filter(Q(prompt__icontains=query) | Q(id__istartswith=query))
    if status in RunStatus.values:
        runs = runs.filter(status=status)
    else:
        status = ""
    page = Paginator(runs.order_by("-created_at").only(*FIELDS), PER_PAGE).get_page(request.GET.get("page"))
    params = {k: v for k, v in (("q", query), ("status", status)) if v}
    return {
        "recent": page,
        "runs_query": query,
        "runs_status": status,
        "run_statuses": RunStatus.choices,
        "runs_params": urlencode(params),
    }


FIELDS = ("id", "status", "prompt", "created_at")
