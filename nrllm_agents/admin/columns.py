"""What the runs list and a run's summary show in their columns: a short id, a coloured status,
durations, one time format (relative, with the local time to the millisecond on hover), money,
and the totals of the listed runs per day and per user."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from django.db.models import Count, DecimalField, F, Q, QuerySet, Sum
from django.db.models.functions import Coalesce, TruncDate
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString

from ..models import AgentRun
from ..money import amounts
from ..web.display import absolute, duration

TOTAL_DAYS = 7  # the per-day totals: the latest days of the listed runs
TOTAL_USERS = 8  # the per-user totals: the biggest spenders first


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
    """Runs, tokens, time and money of the listed runs: all together, per day and per user."""
    runs = AgentRun.objects.filter(pk__in=queryset.order_by().values("pk"))
    sums: dict[str, Any] = {
        "n_runs": Count("pk"),
        "tokens": Coalesce(Sum(F("prompt_tokens") + F("completion_tokens")), 0),
        "cost": Sum("cost", output_field=DecimalField(max_digits=20, decimal_places=6)),
    }
    sums["failed"] = Count("pk", filter=Q(status="failed"))

    def shown(row: Mapping[str, Any]) -> dict[str, Any]:
        return {**row, "cost": amounts.text(row.get("cost")) or "—"}

    per_day = runs.annotate(day=TruncDate("created_at")).values("day").annotate(**sums).order_by("-day")[:TOTAL_DAYS]
    # (an F(): the annotations come from a dict, which the ORM's type plugin cannot read)
    by_tokens = F("tokens").desc()
    per_user = runs.values("owner__username").annotate(**sums).order_by(by_tokens, "owner__username")[:TOTAL_USERS]
    return {
        "all": shown(runs.aggregate(**sums)),
        "per_day": [shown(r) for r in per_day],
        "per_user": [shown(r) for r in per_user],
    }
