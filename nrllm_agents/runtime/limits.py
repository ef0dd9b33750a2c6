"""Limits that stop runs on their own: a deadline and a token budget per run.

A limit stops a run exactly as an operator's cancel does: through the store's guarded cancel
transition, with ``cancel_source`` ``system`` and a ``termination_reason`` of
``deadline_exceeded`` or ``budget_exceeded``; the segment then stops at that boundary like
after any cancel (no settle; the ``cancelled`` step it appends names the limit and the
measured value, taken from ``cancel_detail``).

- ``deadline_seconds``: wall time since creation, waits for approval excluded; checked at every
  step boundary (``enforce``) and, for runs nothing executes, by ``sweep`` (the reaper's).
- ``max_total_tokens`` and ``max_cost``: checked after each model answer, so the call that
  crossed it is recorded and nothing starts after it.
- In a tree of runs each limit bounds the run's subtree (``store.tree_spend``); a run of no
  tree costs no query more. The manual: docs/howto/limits.md and docs/howto/sub-agents.md.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.db import DatabaseError
from django.db.models import Exists, OuterRef, Q
from django.utils import timezone

from .. import store
from ..conf import app_settings
from ..domain import Step, StepKind, Usage
from ..domain.steps import decimal_text
from ..models import AgentRun, CancelSource, RunStatus, TerminationReason
from ..store import tree_spend
from . import trees

logger = logging.getLogger(__name__)

DEADLINE = "deadline_seconds"
BUDGET = "max_total_tokens"
COST = "max_cost"


@dataclass(frozen=True)
class RunLimits:
    """One run's limits, as loaded at the start of a segment (neither changes during one)."""

    deadline_at: datetime | None = None
    deadline_seconds: int | None = None
    max_total_tokens: int | None = None
    max_cost: Decimal | None = None
    tree_root: uuid.UUID | None = None  # the root of the tree the run is in, or leads; None: no tree

    @property
    def any(self) -> bool:
        return self.deadline_at is not None or self.max_total_tokens is not None or self.max_cost is not None


NO_LIMITS = RunLimits()


def deadline_at(run: AgentRun) -> datetime | None:
    """The absolute time a run's deadline passes (approval waits so far excluded), or ``None``.

    While the run waits for approval its deadline is paused: the value is pushed back by the
    wait once the wait ends.
    """
    return run.deadline_at


def load(run_id: uuid.UUID) -> RunLimits:
    """The limits of a run; fail-soft (a store error answers "no limits": never a fabricated stop)."""
    return read(run_id) or NO_LIMITS


def read(run_id: uuid.UUID) -> RunLimits | None:
    """The limits of a run, ``None`` when the store could not be read (logged): unknown, not "none"."""
    try:
        leads = Exists(AgentRun.objects.filter(tree_parent_id=OuterRef("pk")))
        row = (
            AgentRun.objects.filter(pk=run_id)
            .order_by()
            .values("deadline_at", "deadline_seconds", "max_total_tokens", "max_cost", "tree_root_id", leads=leads)
            .first()
        )
    except DatabaseError as exc:
        logger.warning(
            "limits of run %s could not be read (%s); read again at the next boundary", run_id, type(exc).__name__
        )
        return None
    if not row:
        return NO_LIMITS
    root = row["tree_root_id"] or (run_id if row["leads"] else None)
    return RunLimits(
        row["deadline_at"], row["deadline_seconds"], row["max_total_tokens"], row["max_cost"], tree_root=root
    )


def exceeded(
    limits: RunLimits, *, usage: Usage, step_kind: str | None = None, now: datetime | None = None
) -> tuple[str, dict[str, Any], str] | None:
    """The limit a run has exceeded, as ``(termination_reason, detail, reason text)``, or ``None``.

    The budget is looked at after a model answer only (``step_kind`` ``llm``, or ``None`` for
    "any time"); the deadline at any time.
    """
    if limits.max_total_tokens is not None and step_kind in (None, StepKind.LLM):
        spent = usage.total_tokens
        if spent > limits.max_total_tokens:
            detail = {"limit": BUDGET, "value": limits.max_total_tokens, "measured": spent, "unit": "tokens"}
            return (
                TerminationReason.BUDGET_EXCEEDED,
                detail,
                f"token budget exceeded: {spent} tokens spent of {limits.max_total_tokens}",
            )
    if limits.max_cost is not None and step_kind in (None, StepKind.LLM):
        cost = usage.cost or Decimal(0)
        if cost > limits.max_cost:
            currency = app_settings.CURRENCY
            value, measured = decimal_text(limits.max_cost.normalize()), decimal_text(cost)
            detail = {"limit": COST, "value": value, "measured": measured, "unit": currency}
            return (
                TerminationReason.COST_EXCEEDED,
                detail,
                f"cost limit exceeded: {measured} {currency} spent of {value} {currency}",
            )
    if limits.deadline_at is not None:
        now = now or timezone.now()
        if now > limits.deadline_at:
            elapsed = round((limits.deadline_seconds or 0) + (now - limits.deadline_at).total_seconds(), 3)
            detail = {"limit": DEADLINE, "value": limits.deadline_seconds, "measured": elapsed, "unit": "s"}
            return (
                TerminationReason.DEADLINE_EXCEEDED,
                detail,
                f"deadline exceeded: {elapsed:.1f} s elapsed of {limits.deadline_seconds} s",
            )
    return None


def tree_exceeded(
    run_id: uuid.UUID, root: uuid.UUID, usage: Usage
) -> tuple[uuid.UUID, tuple[str, dict[str, Any], str]] | None:
    """The run of ``run_id``'s lineage to stop because its subtree spent more than its limit, and
    the verdict, or ``None``. ``run_id``'s own spend (``usage``) is written first, so the
    concurrent runs of the tree see it: the tree passes a limit by at most the calls in flight."""
    tree_spend.record(run_id, usage)
    found = tree_spend.over(run_id, root)
    if found is None:
        return None
    member, limit, value, measured = found
    whose = "its tree" if member.id == root else f"the subtree of run {member.id}"
    if limit == BUDGET:
        detail = {"limit": BUDGET, "value": value, "measured": measured, "unit": "tokens", "tree": str(member.id)}
        text = f"token budget of {whose} exceeded: {measured} tokens spent of {value}"
        return member.id, (TerminationReason.BUDGET_EXCEEDED, detail, text)
    currency = app_settings.CURRENCY
    value, measured = decimal_text(value.normalize()), decimal_text(measured)
    detail = {"limit": COST, "value": value, "measured": measured, "unit": currency, "tree": str(member.id)}
    text = f"cost limit of {whose} exceeded: {measured} {currency} spent of {value} {currency}"
    return member.id, (TerminationReason.COST_EXCEEDED, detail, text)


def stop(
    run_id: uuid.UUID, verdict: tuple[str, dict[str, Any], str], *, besides: uuid.UUID | None = None
) -> store.Transition:
    """Cancel a run for an exceeded limit: the guarded cancel, by the system, with its reason (and
    every run below it, its sub-agents', which inherit that cancel: ``store.trees``). The calls
    in flight below it that this process executes (but ``besides``'s) stop without a signal."""
    reason, detail, text = verdict
    return trees.cancel(
        run_id, besides=besides, source=CancelSource.SYSTEM, reason=text, termination_reason=reason, detail=detail
    ).transition


class Enforcer:
    """Per segment: reads the run's limits on first use, then checks them at each boundary.

    Read once: a boundary after that costs no query. A read that fails (the database busy or
    away) is not taken for "no limits": it is tried again at the next boundary, and once it
    succeeds ``on_late_read`` is told (the runtime then arms the deadline of the call in flight).
    """

    def __init__(self, run_id: uuid.UUID) -> None:
        self.run_id = run_id
        self._limits: RunLimits | None = None
        self._failed = False
        self.on_late_read: Callable[[RunLimits], None] | None = None

    def __call__(self, step: Step, usage: Usage) -> store.Transition | None:
        return enforce(self.run_id, usage=usage, step=step, limits=self.limits)

    @property
    def limits(self) -> RunLimits:
        if self._limits is None:
            loaded = read(self.run_id)
            if loaded is None:
                self._failed = True
                return NO_LIMITS  # for this boundary only
            self._limits = loaded
            if self._failed and self.on_late_read is not None and loaded.any:
                self.on_late_read(loaded)
        return self._limits


def enforce(
    run_id: uuid.UUID,
    *,
    usage: Usage,
    step: Step | None = None,
    limits: RunLimits | None = None,
    now: datetime | None = None,
) -> store.Transition | None:
    """Check a run's limits at a step boundary; cancel it when one is exceeded.

    Returns ``None`` when no limit is exceeded, else the cancel's ``Transition``: the caller
    stops at this boundary whenever it is not ``None`` (applied, or refused because another
    cancel won the row first: stopped either way). A store error while cancelling is logged
    and answers ``None``: the run goes on and the next boundary tries again.
    """
    limits = load(run_id) if limits is None else limits
    if not limits.any:
        return None
    target, verdict = run_id, None
    spends = limits.max_total_tokens is not None or limits.max_cost is not None
    if limits.tree_root is not None and spends and step is not None and step.kind == StepKind.LLM:
        try:
            found = tree_exceeded(run_id, limits.tree_root, usage)
        except DatabaseError as exc:  # never a fabricated stop: the next boundary reads it again
            logger.warning("run %s: its tree's spend could not be read (%s)", run_id, type(exc).__name__)
            found = None
        if found is not None:
            target, verdict = found
    if verdict is None:
        verdict = exceeded(limits, usage=usage, step_kind=step.kind if step is not None else None, now=now)
    if verdict is None:
        return None
    try:
        fence = stop(target, verdict, besides=run_id)
    except DatabaseError as exc:
        logger.warning(
            "run %s: %s, but the cancel failed (%s); retried at the next boundary",
            run_id,
            verdict[0],
            type(exc).__name__,
        )
        return None
    if fence.applied:
        logger.info("run %s cancelled by the system: %s", target, verdict[2])
    return fence if fence.status == RunStatus.CANCELLED else None


@dataclass
class SweepReport:
    """What one deadline sweep cancelled."""

    cancelled: list[uuid.UUID]
    dry_run: bool = False


def overdue(now: datetime | None = None) -> Any:
    """Runs past their deadline that nothing is executing: queued, or running with an expired lease."""
    now = now or timezone.now()
    idle = Q(status=RunStatus.QUEUED) | Q(status=RunStatus.RUNNING, lease_expires__lt=now)
    return AgentRun.objects.filter(idle, deadline_at__lt=now)


def sweep(*, limit: int = 100, dry_run: bool = False, now: datetime | None = None) -> SweepReport:
    """Cancel overdue runs that nothing is executing (``deadline_exceeded``).

    A queued run is cancelled before any worker claims it, so it never executes; a running
    run whose worker died is cancelled and its stop acknowledged by the reaper's pass that
    follows. Waiting runs are never overdue: their deadline is paused.
    """
    now = now or timezone.now()
    rows = list(overdue(now).order_by("deadline_at").values("id", "deadline_at", "deadline_seconds")[:limit])
    report = SweepReport(cancelled=[], dry_run=dry_run)
    for row in rows:
        verdict = exceeded(RunLimits(row["deadline_at"], row["deadline_seconds"]), usage=Usage(), now=now)
        if verdict is None:
            continue
        if dry_run or stop(row["id"], verdict).applied:
            report.cancelled.append(row["id"])
    return report
