"""Recover queued runs whose wake-up call is gone.

A queued run is only a row; a job (RQ) or a task of the in-process executor wakes a worker for it.
That job can vanish (Redis restarted without persistence, a queue emptied, a crash between the
commit and the enqueue, a claim that met no database), and the run would wait forever.
``sweep_queued`` finds queued runs older than ``QUEUED_STALE_SECONDS`` that have no live job and
dispatches them again. That is safe: the job carries only the run id and the claim has one winner;
and where the job is is read in one atomic snapshot (``rq_queue.job_state``), a run found without
one being dispatched only if it is still queued after that look.

The sweep runs in ``manage.py agent_reap`` (docs/operations/workers.md), at every RQ worker's
maintenance pass, and every ``QUEUED_SWEEP_SECONDS`` under the in-process executor (``make run``).
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db.models import Exists, OuterRef
from django.utils import timezone

from .. import executors, store
from ..conf import app_settings
from ..models import AgentRun, RunStatus
from . import dispatch

logger = logging.getLogger(__name__)


@dataclass
class SweepReport:
    """What one sweep found: runs dispatched again, and stale runs whose job is still there."""

    recovered: list[uuid.UUID] = field(default_factory=list)
    waiting: int = 0  # stale, but a job is queued, scheduled or executing for them
    skipped: list[uuid.UUID] = field(default_factory=list)  # one run's own error; retried next sweep
    error: str = ""  # the queue could not be asked (an outage); the rest waits for the next sweep
    dry_run: bool = False

    def summary(self) -> str:
        verb = "would recover" if self.dry_run else "recovered"
        text = f"queued runs: {len(self.recovered)} {verb} (no job), {self.waiting} still waiting for a worker"
        if self.skipped:
            text += f", {len(self.skipped)} skipped (see the log)"
        return f"{text}; stopped early: {self.error}" if self.error else text


def _stale_seconds() -> float:
    return float(app_settings.QUEUED_STALE_SECONDS)


def stale_queued(*, older_than: float, limit: int, now: datetime | None = None) -> list[uuid.UUID]:
    """Ids of queued runs created more than ``older_than`` seconds ago, oldest first.

    A thread's message waiting for an earlier run of its thread to stop is not stranded: no
    job is meant to wake it yet (``threads.py``), so it is left out.
    """
    cutoff = (now or timezone.now()) - timedelta(seconds=older_than)
    behind = AgentRun.objects.filter(
        thread_id=OuterRef("thread_id"), thread_position__lt=OuterRef("thread_position"), stopped_at__isnull=True
    )
    return list(
        AgentRun.objects.filter(status=RunStatus.QUEUED, created_at__lte=cutoff)
        .exclude(Exists(behind))
        .order_by("created_at")
        .values_list("id", flat=True)[:limit]
    )


def sweep_queued(*, limit: int = 100, dry_run: bool = False, older_than: float | None = None) -> SweepReport:
    """Dispatch again every stale queued run (see the module docstring) that has no live job."""
    report = SweepReport(dry_run=dry_run)
    older_than = _stale_seconds() if older_than is None else older_than
    for run_id in stale_queued(older_than=older_than, limit=limit):
        try:
            if has_live_job(run_id, stale_after=older_than):
                report.waiting += 1
                continue
            if not still_queued(run_id):  # claimed (and maybe finished) since it was listed: not stranded
                continue
            if not dry_run:
                dispatch.dispatch(run_id)
        except Exception as exc:
            if dispatch.is_outage(exc):  # the queue is away: leave the rest for the next sweep
                report.error = f"{type(exc).__name__}: {str(exc)[:200]}"
                logger.warning("queued sweep stopped: %s", report.error)
                break
            # One run's trouble (a job the queue cannot read or delete whole) is that run's: the
            # runs behind it, oldest first, are not held back by it pass after pass.
            report.skipped.append(run_id)
            logger.warning("queued sweep skipped run %s: %s: %s", run_id, type(exc).__name__, str(exc)[:200])
            continue
        report.recovered.append(run_id)
    if report.recovered and not dry_run:
        logger.warning("queued sweep: dispatched %d stranded runs again", len(report.recovered))
    return report


def still_queued(run_id: uuid.UUID) -> bool:
    """Whether the run is still queued, read after its job was found gone: a job dequeued,
    executed and finished between the listing and that look is not a stranded run."""
    return AgentRun.objects.filter(pk=run_id, status=RunStatus.QUEUED).exists()


def has_live_job(run_id: uuid.UUID, *, stale_after: float | None = None) -> bool:
    """Whether something will still wake the run: the chosen executor's job for the run's next
    segment (RQ: queued, scheduled and not long overdue, or executing on a live worker) or a
    task of this process's in-process executor (``executors.base.Executor.holds``)."""
    return executors.chosen().holds(
        str(run_id),
        job_id=dispatch.job_id(run_id, store.next_sequence(run_id)),
        stale_after=_stale_seconds() if stale_after is None else stale_after,
    )
