"""What the admin's operations page shows: runs by status, stuck runs, the reaper, the queue, MCP servers.

Runs by status reads no more rows at ten million runs than at a thousand (issue 45): the active
statuses are counted whole (few runs, read through the status indexes), the terminal ones only
for the runs created in the last ``RECENT_WINDOW`` (a range of the ``(status, created_at)``
index); the page labels the window.

Stuck means one of:

- ``lease_expired``: running, but its segment stopped renewing its lease (a dead worker); the
  reaper requeues or dead-letters it on its next pass;
- ``unacknowledged_cancel``: cancelled while running, the segment died before its boundary and
  the lease has expired; the reaper acknowledges it;
- ``queued_without_job``: queued, but no live RQ job will ever claim it: the deterministic job
  id ``dispatch.job_id(run_id, next_sequence)`` is missing from Redis, or that job already
  finished, failed or was stopped. Only with the RQ executor: the in-process executor's
  jobs live in the memory of the process that queued them and cannot be seen from here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Count, Max, QuerySet
from django.utils import timezone

from ..executors import dispatch
from ..mcp import catalog
from ..models import ACTIVE, TERMINAL, AgentRun, AgentRunEvent, ReaperPass, RunStatus

QUEUED_CHECK_LIMIT = 2000  # queued runs whose job is looked up per page view (oldest first)
LIVE_JOB_STATES = {"queued", "scheduled", "deferred", "started"}
RECENT_WINDOW = timedelta(hours=24)  # terminal runs are counted among the runs created this recently


@dataclass
class Overview:
    """Everything the page shows; each count has a filter of the runs list behind it."""

    by_status: list[tuple[str, str, int]]  # (value, label, count) for every active status, all of them
    recent_by_status: list[tuple[str, str, int]]  # the same for every terminal status, created since ``since``
    since: datetime
    lease_expired: int
    unacknowledged_cancel: int
    queued_without_job: int | None  # None: not knowable (no Redis) or Redis unreachable
    queued_checked: int
    queue: dict[str, int] | None
    queue_error: str = ""
    last_pass: ReaperPass | None = None
    recent_passes: list[ReaperPass] = field(default_factory=list)
    mcp_servers: list[dict[str, Any]] = field(default_factory=list)  # one row per MCP server (mcp.catalog.health)
    now: datetime = field(default_factory=timezone.now)


def lease_expired(now: datetime | None = None) -> QuerySet[AgentRun]:
    return AgentRun.objects.filter(status=RunStatus.RUNNING, lease_expires__lt=now or timezone.now())


def unacknowledged_cancel(now: datetime | None = None) -> QuerySet[AgentRun]:
    return AgentRun.objects.filter(
        status=RunStatus.CANCELLED, stopped_at__isnull=True, lease_expires__lt=now or timezone.now()
    )


def queued_without_job(limit: int = QUEUED_CHECK_LIMIT) -> tuple[list[Any], int]:
    """Ids of queued runs (the oldest ``limit``) with no live RQ job, and how many were checked.

    Raises what Redis raises when it cannot be reached; callers decide how to show that.
    """
    import django_rq
    from rq.job import Job

    from ..conf import app_settings

    ids = list(
        AgentRun.objects.filter(status=RunStatus.QUEUED).order_by("created_at").values_list("pk", flat=True)[:limit]
    )
    if not ids:
        return [], 0
    last = dict(
        AgentRunEvent.objects.filter(run_id__in=ids).order_by().values_list("run_id").annotate(m=Max("sequence"))
    )
    job_ids = [dispatch.job_id(pk, 0 if last.get(pk) is None else last[pk] + 1) for pk in ids]
    connection = django_rq.get_queue(app_settings.QUEUE_NAME).connection
    jobs = Job.fetch_many(job_ids, connection=connection)
    missing = [pk for pk, job in zip(ids, jobs) if job is None or _state(job) not in LIVE_JOB_STATES]
    return missing, len(ids)


def _state(job: Any) -> str:
    status = job.get_status(refresh=False)
    return str(getattr(status, "value", status) or "")


def _by_status(runs: QuerySet[AgentRun]) -> dict[str, int]:
    return dict(runs.order_by().values_list("status").annotate(n=Count("pk")))


def overview() -> Overview:
    """Read the page's figures: the active runs and the recent terminal ones by status, two
    indexed counts, Redis when configured."""
    from .collectors import queue_depth

    now = timezone.now()
    since = now - RECENT_WINDOW
    counts = _by_status(AgentRun.objects.filter(status__in=ACTIVE))
    counts.update(_by_status(AgentRun.objects.filter(status__in=TERMINAL, created_at__gte=since)))
    by_status = [(value, label, counts.get(value, 0)) for value, label in RunStatus.choices if value in ACTIVE]
    recent = [(value, label, counts.get(value, 0)) for value, label in RunStatus.choices if value in TERMINAL]
    missing: int | None = None
    checked = 0
    queue = None
    error = ""
    if dispatch.uses_rq():
        try:
            ids, checked = queued_without_job()
            missing = len(ids)
            queue = queue_depth()
        except Exception as exc:  # Redis down: say so on the page, never a server error
            error = f"{type(exc).__name__}: {str(exc)[:200]}"
    passes = list(ReaperPass.objects.all()[:10])
    return Overview(
        by_status=by_status,
        recent_by_status=recent,
        since=since,
        lease_expired=lease_expired(now).count(),
        unacknowledged_cancel=unacknowledged_cancel(now).count(),
        queued_without_job=missing,
        queued_checked=checked,
        queue=queue,
        queue_error=error,
        last_pass=passes[0] if passes else None,
        recent_passes=passes,
        mcp_servers=catalog.health(retry=False),
        now=now,
    )
