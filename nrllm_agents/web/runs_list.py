"""The playground's list of the user's runs: searched by prompt or id, filtered by status, paged.

A page reads one page of rows and one more (to know whether an older page exists), never a count
of the user's runs, and the search goes through an index (``store.search``): the list answers as
fast for a user with a hundred thousand runs as for one with ten (issue 45).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from django.http import HttpRequest

from ..models import AgentRun, RunStatus
from ..store.search import NEWEST_FIRST, search

PER_PAGE = 15
MAX_QUERY = 200
# One user's matches sorted at most (read through the trigram index); more matches than that are
# met along the owner's newest-first index instead, a page reading until it has its runs.
SORT_CAP = 2000
MAX_PAGE = 1000  # a page number past this (or not a number) reads the first page: OFFSET stays bounded


@dataclass
class RunsPage:
    """One page of runs, newest first, and whether newer and older pages exist (no total)."""

    runs: list[AgentRun]
    number: int
    has_next: bool

    def __iter__(self) -> Any:
        return iter(self.runs)

    def __len__(self) -> int:
        return len(self.runs)

    @property
    def has_previous(self) -> bool:
        return self.number > 1

    @property
    def has_other_pages(self) -> bool:
        return self.has_previous or self.has_next

    @property
    def previous_page_number(self) -> int:
        return self.number - 1

    @property
    def next_page_number(self) -> int:
        return self.number + 1


def page_number(value: str | None) -> int:
    try:
        number = int(value or 1)
    except ValueError:
        return 1
    return number if 1 <= number <= MAX_PAGE else 1


def recent_runs(request: HttpRequest) -> dict[str, Any]:
    """``recent`` (a page of the user's runs, newest first) and what the list's form shows.

    ``?q=`` matches words of the prompt or the start of a run id; ``?status=`` one status;
    ``?page=`` a page (past the last one: the first page again).
    """
    query = (request.GET.get("q") or "").strip()[:MAX_QUERY]
    status = request.GET.get("status") or ""
    runs = AgentRun.objects.filter(owner_id=request.user.pk).order_by(*NEWEST_FIRST).only(*FIELDS)
    if status in RunStatus.values:
        runs = runs.filter(status=status)
    else:
        status = ""
    if query:
        runs = search(runs, query, sort_cap=SORT_CAP)
    number = page_number(request.GET.get("page"))
    rows = list(runs[(number - 1) * PER_PAGE : number * PER_PAGE + 1])
    if not rows and number > 1:  # past the last page
        number, rows = 1, list(runs[: PER_PAGE + 1])
    page = RunsPage(rows[:PER_PAGE], number, has_next=len(rows) > PER_PAGE)
    params = {k: v for k, v in (("q", query), ("status", status)) if v}
    return {
        "recent": page,
        "runs_query": query,
        "runs_status": status,
        "run_statuses": RunStatus.choices,
        "runs_params": urlencode(params),
    }


FIELDS = ("id", "status", "prompt", "created_at")
