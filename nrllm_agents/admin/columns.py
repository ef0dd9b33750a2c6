"""What the runs list and a run's summary show in their columns: a short id, a coloured status,
durations, one time format (relative, with the local time to the millisecond on hover), money,
and the totals of the listed runs per day and per user."""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from django.db.models import F, QuerySet
from django.db.models.functions import TruncDate
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString

from ..models import AgentRun
from ..money import amounts
from ..web.display import absolute, duration

TOTAL_DAYS = 7  # the per-day totals: the latest days of the listed runs
TOTAL_USERS = 8  # the per-user totals: the biggest spenders first
TOTALS_WINDOW = 5_000  # the totals sum the newest this many listed runs


def ago(moment: datetime, now: datetime | None = None) -> str:
    """``just now``, ``12 s ago``, ``5 min ago``, ``3 h ago``, ``4 d ago``."""
    seconds = ((now or timezone.now()) - moment).total_seconds()
    if seconds < 5:
        return "just now"
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f} {unit} ago"
    return f"{seconds:.0f} s ago"


def when(moment: datetime | None) -> SafeString | str:
    """``<time>`` with a relative text and the local time, to the millisecond, as its title."""
    if moment is None:
        return "-"
    exact = f"{absolute(moment)} ({moment.astimezone(UTC).isoformat(timespec='milliseconds')})"
    return format_html('<time datetime="{}" title="{}">{}</time>', moment.isoformat(), exact, ago(moment))


def span(start: datetime | None, end: datetime | None) -> str:
    """The time from ``start`` to ``end`` (or now) as ``830 ms`` / ``2.41 s``; ``-`` before a start."""
    if start is None:
        return "-"
    return duration(max(((end or timezone.now()) - start).total_seconds(), 0.0) * 1000)


def tokens_of(run: AgentRun, spend: Any) -> dict[str, int]:
    """A run's tokens and model calls: its row's once it settles; while it executes, its
    recorded steps' (``gantt.Spend``), which count them as they land."""
    row = {"total": run.total_tokens, "prompt": run.prompt_tokens, "completion": run.completion_tokens}
    if spend is not None and spend.total_tokens > row["total"]:
        row = {"total": spend.total_tokens, "prompt": spend.prompt_tokens, "completion": spend.completion_tokens}
    return row


def status_badge(run: AgentRun) -> SafeString:
    reason = run.get_termination_reason_display() if run.termination_reason else run.get_status_display()
    return format_html(
        '<span class="run-status status-{}" title="{}">{}</span>', run.status, reason, run.status.replace("_", " ")
    )


def cost_text(run: AgentRun) -> str:
    """The run's cost, or ``—`` while it has none."""
    return amounts.text(run.cost) or "—"


def totals(queryset: QuerySet[AgentRun]) -> dict[str, Any]:
    """Runs, tokens and money of the newest ``TOTALS_WINDOW`` listed runs: all together, per day
    and per user.

    One query of at most ``TOTALS_WINDOW`` rows, read newest first through the ``created_at``
    index, summed here: the totals cost the same at a thousand runs and at ten million (issue
    45). (Summed in SQL over that window, PostgreSQL hashes the window's ids and then scans the
    whole table for them.) ``window`` is set when the listed runs are more than that, and the
    list says so.
    """
    rows = list(
        queryset.order_by("-created_at", "-pk")
        .annotate(day=TruncDate("created_at"), tokens=F("prompt_tokens") + F("completion_tokens"))
        .values_list("day", "owner__username", "tokens", "cost", "status")[: TOTALS_WINDOW + 1]
    )
    everything = _Sums()
    days: defaultdict[Any, _Sums] = defaultdict(_Sums)
    users: defaultdict[str | None, _Sums] = defaultdict(_Sums)
    for day, username, tokens, cost, status in rows[:TOTALS_WINDOW]:
        failed = status == "failed"
        everything.add(tokens, cost, failed)
        days[day].add(tokens, cost, failed)
        users[username].add(tokens, cost, failed)
    per_day = sorted(days.items(), key=lambda item: item[0], reverse=True)[:TOTAL_DAYS]
    per_user = sorted(users.items(), key=lambda item: (-item[1].tokens, item[0] or ""))[:TOTAL_USERS]
    return {
        "all": everything.shown(),
        "per_day": [{"day": day, **sums.shown()} for day, sums in per_day],
        "per_user": [{"owner__username": name, **sums.shown()} for name, sums in per_user],
        "window": TOTALS_WINDOW if len(rows) > TOTALS_WINDOW else None,
    }


class _Sums:
    """One row of totals: runs, failed runs, tokens and cost (``None`` while no run has a cost)."""

    def __init__(self) -> None:
        self.n_runs = self.failed = self.tokens = 0
        self.cost: Decimal | None = None

    def add(self, tokens: int, cost: Decimal | None, failed: bool) -> None:
        self.n_runs += 1
        self.failed += failed
        self.tokens += tokens
        if cost is not None:
            self.cost = cost if self.cost is None else self.cost + cost

    def shown(self) -> dict[str, Any]:
        cost = amounts.text(self.cost) or "—"
        return {"n_runs": self.n_runs, "failed": self.failed, "tokens": self.tokens, "cost": cost}
