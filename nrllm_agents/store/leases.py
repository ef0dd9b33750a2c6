"""Leases: a segment proves at every boundary that it is alive and still owns its run.

Every write here is guarded by ownership (``status = running AND claimed_by = me``) or,
for the reaper, by staleness re-checked inside the statement, so a heartbeat that lands
between the reaper's scan and its write wins.
"""

from __future__ import annotations

import contextlib
import json
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db import DEFAULT_DB_ALIAS, DatabaseError, IntegrityError, connection, connections, transaction
from django.utils import timezone

from ..conf import app_settings
from ..domain import Step, Usage
from ..models import AgentRun, AgentRunEvent, RunStatus, TerminationReason
from . import budgets, prepared
from .budgets import Charge
from .journal import append_cancelled, append_event, ended_fields, owned, requeued_fields, spend_fields, stop_stamp
from .results import NOT_FOUND, Lease, Transition
from .retries import RetryPolicy

logger = logging.getLogger(__name__)


def _isolated(query: Callable[[], Any], db: Any = None) -> Any:
    """Run a fail-soft query; inside a caller's transaction, in a savepoint so a failure
    does not doom that transaction. In autocommit (the normal case) it costs nothing extra.
    ``db``: the default connection, when the caller has already looked it up."""
    if (db or transaction.get_connection()).in_atomic_block:
        with transaction.atomic():
            return query()
    return query()


def lease_until(now: datetime | None = None) -> datetime:
    return (now or timezone.now()) + timedelta(seconds=app_settings.LEASE_SECONDS)


on_boundary: Callable[[uuid.UUID, int, bool], None] | None = None
"""Told of every boundary that held: ``(run id, sequence, watched)``. Set by the process's
publisher (``deltas.py``), which announces watched steps; the store imports nothing above it."""


_payload_json = json.JSONEncoder(default=str).encode
"""``json.dumps(payload, default=str)`` without building an encoder at every step."""


def _held(matched: bool) -> Lease:
    return Lease.HELD if matched else Lease.NOT_HELD


def renew(run_id: uuid.UUID, owner: str, *, effect: dict[str, Any] | None = None, clear_effect: bool = False) -> Lease:
    """Extend this segment's lease with one guarded UPDATE.

    ``HELD``: still running and ours. ``NOT_HELD``: not any more (cancelled, reaped,
    finished). ``UNKNOWN``: the store could not be reached; callers go on (a hiccup never
    stops a run). ``effect`` stamps the non-idempotent call about to start; ``clear_effect``
    removes it.
    """
    fields: dict[str, Any] = {"lease_expires": lease_until()}
    if effect is not None:
        fields["pending_effect"] = effect
    elif clear_effect:
        fields["pending_effect"] = None
    try:
        return _held(_isolated(lambda: owned(run_id, owner).update(**fields)) == 1)
    except DatabaseError as exc:
        logger.warning("lease renewal for run %s failed (%s); going on", run_id, type(exc).__name__)
        return Lease.UNKNOWN


def record_step(
    run_id: uuid.UUID,
    owner: str,
    sequence: int,
    step: Step,
    created_at: datetime,
    charge: Charge | None = None,
) -> Lease:
    """Renew this segment's lease and, only if that matched, append the step: one commit.

    ``HELD``: renewed and recorded. ``NOT_HELD``: the renewal matched no row (cancelled or
    lost) and NOTHING was written. ``UNKNOWN``: the store could not be reached.
    On PostgreSQL it is a single prepared statement (an ``UPDATE ... RETURNING`` feeding
    the ``INSERT``) and, since ``lease_expires`` is in no index, the renewal is a HOT update;
    elsewhere both statements run in one transaction. A duplicate sequence
    (another segment wrote it) raises ``IntegrityError``.

    With ``charge`` (a model call's step under shared budgets), the call's spend is settled on
    its budgets in the same commit, and only when the step is appended (``budgets.settlement``
    joins the statement, gated on the renewal); the fence fills the charge in.

    It also returns how many processes watch the run (``watchers``, read under the renewal's row
    lock, so a watcher that registers meanwhile is either seen here or reads this step itself) and
    hands it to ``on_boundary`` (the process's publisher, ``deltas.py``), which announces the step
    once it is committed. Its duration is timed by the caller (``segment``).
    """
    until = lease_until()
    db = connections[DEFAULT_DB_ALIAS]  # looked up once: this is the step path
    try:
        if prepared.enabled():  # not db.vendor: the portable path is forced through it in tests
            sql, params = (
                (_RECORD_SQL, _record_params(until, run_id, owner, sequence, step, created_at))
                if charge is None
                else (_RECORD_CHARGED_SQL, _charged_params(until, run_id, owner, sequence, step, created_at, charge))
            )
            _, rows = _isolated(lambda: prepared.execute(sql, params, fetch=True), db)
            hook = on_boundary
            if rows and hook is not None:
                if rows[0][0] > 0:
                    transaction.on_commit(lambda: hook(run_id, sequence, True))  # at once in autocommit
                else:
                    hook(run_id, sequence, False)
            if rows and charge is not None:
                charge.charged, charge.exhausted = True, list(rows[0][1])
            return _held(len(rows) == 1)
        with budgets.serialized() if charge is not None else contextlib.nullcontext(), transaction.atomic():
            if not owned(run_id, owner).update(lease_expires=until):
                return Lease.NOT_HELD
            append_event(run_id, sequence, step, created_at)
            if charge is not None:
                _settle(run_id, charge)
            return Lease.HELD
    except IntegrityError:
        raise
    except DatabaseError as exc:
        logger.warning("boundary write for run %s failed (%s); going on", run_id, type(exc).__name__)
        return Lease.UNKNOWN


def _record_params(
    until: datetime, run_id: uuid.UUID, owner: str, sequence: int, step: Step, created_at: datetime
) -> list[Any]:
    """The parameters of ``_RECORD_SQL``, in order."""
    kind, payload = step.kind.value, _payload_json(step.payload)
    return [until, run_id, _RUNNING, owner, sequence, kind, step.round, step.duration_ms, payload, created_at]


def _charged_params(
    until: datetime, run_id: uuid.UUID, owner: str, sequence: int, step: Step, created_at: datetime, charge: Charge
) -> dict[str, Any]:
    """The parameters of ``_RECORD_CHARGED_SQL``, by name."""
    names = ("until", "run", "running", "owner", "sequence", "kind", "round", "duration_ms", "payload", "created_at")
    return {
        **budgets.settlement_params(charge.budget_ids, run_id, charge.cost, charge.tokens),
        **dict(zip(names, _record_params(until, run_id, owner, sequence, step, created_at), strict=True)),
    }


def _settle(run_id: uuid.UUID, charge: Charge) -> None:
    """Inside a step's fence that appended the step: settle its ``charge``."""
    charge.exhausted = budgets.settle(charge.budget_ids, run_id=run_id, cost=charge.cost, tokens=charge.tokens)
    charge.charged = True


_RUNNING = RunStatus.RUNNING.value
_RECORD_SQL = (
    f"WITH renewed AS (UPDATE {AgentRun._meta.db_table} SET lease_expires = %s "
    f"WHERE id = %s AND status = %s AND claimed_by = %s RETURNING id, watchers), "
    f"appended AS (INSERT INTO {AgentRunEvent._meta.db_table} "
    f"(run_id, sequence, kind, round, duration_ms, payload, created_at) "
    f"SELECT id, %s, %s, %s, %s, %s::jsonb, %s FROM renewed) "
    f"SELECT watchers FROM renewed"
)
# The same boundary with a model call's settlement (named parameters, for the settlement's).
_RECORD_CHARGED_SQL = (
    f"WITH renewed AS (UPDATE {AgentRun._meta.db_table} SET lease_expires = %(until)s "
    f"WHERE id = %(run)s AND status = %(running)s AND claimed_by = %(owner)s RETURNING id, watchers), "
    f"appended AS (INSERT INTO {AgentRunEvent._meta.db_table} "
    f"(run_id, sequence, kind, round, duration_ms, payload, created_at) "
    f"SELECT id, %(sequence)s, %(kind)s, %(round)s, %(duration_ms)s, %(payload)s::jsonb, %(created_at)s "
    f"FROM renewed), {budgets.settlement(gate='renewed')} "
    f"SELECT watchers, ARRAY(SELECT id FROM upd WHERE exhausted ORDER BY id) FROM renewed"
)


def why_not_held(run_id: uuid.UUID, owner: str) -> Lease:
    """Why a renewal matched no row: ``CANCELLED`` (cancelled while ours) or ``LOST``.

    ``UNKNOWN`` when the row cannot be read: callers treat that as "not cancelled".
    """
    try:
        row = _isolated(lambda: AgentRun.objects.filter(pk=run_id).values("status", "claimed_by").order_by().first())
    except DatabaseError as exc:
        logger.warning("ownership read for run %s failed (%s)", run_id, type(exc).__name__)
        return Lease.UNKNOWN
    if row is not None and row["status"] == RunStatus.CANCELLED and row["claimed_by"] == owner:
        return Lease.CANCELLED
    return Lease.LOST


def requeue(
    run_id: uuid.UUID,
    owner: str,
    *,
    count_attempt: bool,
    error_class: str = "",
    error_message: str = "",
    iterations: int | None = None,
    usage: Usage | None = None,
) -> Transition:
    """``running → queued`` by the owning segment (a transient failure, a graceful shutdown).

    The run continues later from its recorded stream; the row keeps the spend so far
    (``iterations``, ``usage``), so a queued run shows what it already cost.
    """
    n = owned(run_id, owner).update(
        **requeued_fields(count_attempt=count_attempt),
        **spend_fields(iterations, usage),
        pending_effect=None,
        error_class=error_class,
        error_message=error_message[:2000],
    )
    if n:
        return Transition(True, RunStatus.QUEUED, RunStatus.RUNNING)
    status = AgentRun.objects.filter(pk=run_id).values_list("status", flat=True).first()
    return Transition(False, status, status) if status else NOT_FOUND


@dataclass(frozen=True)
class Reaped:
    """One run whose expired lease the reaper acted on: the verdict (``requeue`` or the dead
    letter's reason), the run's provider, and whether the write applied (``False``: it renewed
    its lease meanwhile). Read from the rows the reaper already fetched, for the metrics the
    runtime emits from the report."""

    run_id: uuid.UUID
    verdict: str
    provider: str
    applied: bool


@dataclass
class ReapReport:
    """What one pass of the reaper found and did."""

    requeued: list[uuid.UUID] = field(default_factory=list)
    dead_lettered: dict[str, int] = field(default_factory=dict)  # reason -> runs
    acknowledged: int = 0  # cancelled runs whose segment died before acknowledging
    skipped: int = 0  # came back to life (heartbeat) between scan and write
    dry_run: bool = False
    deadline_cancelled: int = 0  # overdue runs nothing was executing, cancelled first (nrllm_agents.runtime.limits)
    holds_released: int = 0  # budget reservations of dead segments given back (store.budgets.release_dead)
    reaped: list[Reaped] = field(default_factory=list)  # every write tried, in order (none on a dry run)
    in_doubt: int = 0  # of ``requeued``: lost during a non-idempotent call; they wait for a decision

    def summary(self) -> str:
        parts = [f"{self.deadline_cancelled} cancelled (deadline_exceeded)"] if self.deadline_cancelled else []
        parts += [f"{len(self.requeued)} requeued" + (f" ({self.in_doubt} in doubt)" if self.in_doubt else "")]
        parts += [f"{n} dead-lettered ({reason})" for reason, n in sorted(self.dead_lettered.items())]
        parts += [f"{self.holds_released} budget reservations released"] if self.holds_released else []
        parts += [f"{self.acknowledged} cancel acknowledged", f"{self.skipped} skipped (alive)"]
        return ("would have: " if self.dry_run else "") + ", ".join(parts)


IN_DOUBT = "in_doubt"
"""The reaper's verdict on a run lost during a non-idempotent call (``IN_DOUBT = "wait"``)."""


def reap(*, limit: int = 100, dry_run: bool = False, now: datetime | None = None) -> ReapReport:
    """Requeue or dead-letter running runs whose lease expired.

    A run whose lost segment had stamped a non-idempotent effect is in doubt: the call may or
    may not have happened. With ``IN_DOUBT = "wait"`` (the default) it goes back to the queue
    with its stamp, and no attempt counted: the next segment suspends it for a person's decision
    instead of making the call again. With ``"fail"`` it is dead-lettered (``not_retryable``).
    One that used its requeue budget is dead-lettered (``retries_exhausted``). The others go
    back to the queue and continue from their stream. Each write re-checks the expiry inside
    its statement.
    """
    now = now or timezone.now()
    report = ReapReport(dry_run=dry_run)
    policy = RetryPolicy.from_settings()
    budget = policy.max_attempts
    stale = list(
        AgentRun.objects.filter(status=RunStatus.RUNNING, lease_expires__lt=now)
        .order_by("lease_expires")
        .values("id", "attempts", "pending_effect", "provider")[:limit]
    )
    waits = app_settings.IN_DOUBT != "fail"
    for row in stale:
        if row["pending_effect"]:
            verdict = IN_DOUBT if waits else TerminationReason.NOT_RETRYABLE.value
        elif not policy.may_retry(row["attempts"]):
            verdict = TerminationReason.RETRIES_EXHAUSTED.value
        else:
            verdict = "requeue"
        if dry_run:
            _count(report, verdict, row["id"])
            continue
        still_stale = AgentRun.objects.filter(pk=row["id"], status=RunStatus.RUNNING, lease_expires__lt=now)
        if verdict in ("requeue", IN_DOUBT):  # in doubt: the stamp stays, for the next segment
            n = still_stale.update(**requeued_fields(count_attempt=verdict == "requeue"))
        else:
            message = (
                "the worker was lost during a non-idempotent tool call; not retried"
                if row["pending_effect"]
                else f"the worker was lost and the budget of {budget} requeues is used"
            )
            n = still_stale.update(
                **ended_fields(RunStatus.FAILED, verdict, now, error_class="LeaseExpired", error_message=message)
            )
        if n:
            _count(report, verdict, row["id"])
        else:
            report.skipped += 1
        report.reaped.append(Reaped(row["id"], verdict, row["provider"], applied=bool(n)))
    report.acknowledged = _acknowledge_orphaned_cancels(now, limit, dry_run)
    return report


def _count(report: ReapReport, verdict: str, run_id: uuid.UUID) -> None:
    if verdict in ("requeue", IN_DOUBT):
        report.requeued.append(run_id)
        report.in_doubt += verdict == IN_DOUBT
    else:
        report.dead_lettered[verdict] = report.dead_lettered.get(verdict, 0) + 1


def _acknowledge_orphaned_cancels(now: datetime, limit: int, dry_run: bool) -> int:
    """Cancelled while running, and the segment died before its boundary: acknowledge for it."""
    orphans = list(
        AgentRun.objects.filter(status=RunStatus.CANCELLED, stopped_at__isnull=True, lease_expires__lt=now).values_list(
            "id", flat=True
        )[:limit]
    )
    if dry_run:
        return len(orphans)
    done = 0
    for run_id in orphans:
        try:
            with transaction.atomic():
                n = AgentRun.objects.filter(pk=run_id, stopped_at__isnull=True, lease_expires__lt=now).update(
                    stopped_at=stop_stamp(now, after="finished_at"),
                    finished_at=stop_stamp(now, after="finished_at"),
                    claimed_by="",
                    lease_expires=None,
                    pending_effect=None,
                )
                if n:
                    append_cancelled(run_id, now)
                    done += 1
        except IntegrityError:  # the segment acknowledged after all, in between
            continue
    return done


def append_owned(
    run_id: uuid.UUID, owner: str, sequence: int, step: Step, created_at: datetime, charge: Charge | None = None
) -> Lease:
    """Append a step without renewing the lease, only while this segment still holds the run.

    The fallback of a boundary whose fused write failed: the row must be claimed by
    ``owner`` and running, or cancelled and not yet acknowledged (the step in flight of a
    cancelled run is still recorded): ``HELD``. ``NOT_HELD``: not ours any more, nothing was
    written. ``charge``: settled in the same transaction, only when the step is appended.
    Raises ``DatabaseError`` when the store cannot be reached, ``IntegrityError`` when the
    sequence is taken.
    """
    run_table, event_table = AgentRun._meta.db_table, AgentRunEvent._meta.db_table
    cast = "::jsonb" if connection.vendor == "postgresql" else ""
    sql = (
        f"INSERT INTO {event_table} (run_id, sequence, kind, round, duration_ms, payload, created_at) "
        f"SELECT id, %s, %s, %s, %s, %s{cast}, %s FROM {run_table} "
        f"WHERE id = %s AND claimed_by = %s AND status IN (%s, %s) AND stopped_at IS NULL"
    )
    params = [
        sequence,
        step.kind.value,
        step.round,
        step.duration_ms,
        _payload_json(step.payload),
        _field(AgentRunEvent, "created_at").get_db_prep_value(created_at, connection),
        _field(AgentRun, "id").get_db_prep_value(run_id, connection),
        owner,
        RunStatus.RUNNING.value,
        RunStatus.CANCELLED.value,
    ]
    with budgets.serialized() if charge is not None else contextlib.nullcontext(), transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            appended = cursor.rowcount == 1
        if appended and charge is not None:
            _settle(run_id, charge)
        return _held(appended)


def _field(model: Any, name: str) -> Any:
    """A concrete field of ``model`` (its database adaptation is what raw SQL needs)."""
    return model._meta.get_field(name)
