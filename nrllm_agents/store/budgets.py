"""Budgets shared by many runs: the reservation of a model call's worst case, its settlement,
and the release of what a dead segment held. The only writer of a ``Budget``'s counters.

A budget counts its spend in a window (a day, a month, on calendar boundaries in ``TIME_ZONE``,
or in total). A window that has passed counts as zero; the next write moves ``period_start``
to the current window, in the same statement. Nothing sweeps the windows.

``reserve`` is all-or-nothing over every budget covering a run: on PostgreSQL one statement
whose CTE locks the budgets in id order (so two reservations never deadlock), checks every
ceiling on the locked rows, and adds the reservation (and its holds) only when all fit; on
SQLite the same in one ``IMMEDIATE`` transaction (serialized by the database) with the ORM.

A model call's spend is charged (``Charge``) in the fence that records its step
(``leases.record_step``, ``leases.append_owned``): a segment that lost its run charges nothing.
"""

from __future__ import annotations

import contextlib
import threading
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from django.db import connection, transaction
from django.db.models import Q
from django.utils import timezone

from ..models import AgentRun, Budget, BudgetHold, BudgetScope, BudgetWindow, RunStatus

ZERO = Decimal(0)
# One process's threads queue here rather than on SQLite's busy timeout; reentrant, since a
# step's fence takes it before its transaction and the settlement inside it takes it again.
_sqlite_lock = threading.RLock()


@contextlib.contextmanager
def serialized() -> Iterator[None]:
    """Around a transaction that will write budgets: on SQLite, this process's budget writers
    one at a time, taken before the transaction (the order every budget writer follows); on
    PostgreSQL nothing (the rows' locks do it)."""
    if not _orm():
        yield
        return
    with _sqlite_lock:
        yield


@dataclass
class Charge:
    """A model call's actual spend, charged to ``budget_ids`` (every budget covering its run) by
    the fence that records the call's step, and only if it records it. That fence fills in
    ``charged`` and ``exhausted`` (the budgets this spend brought to a ceiling)."""

    budget_ids: list[int]
    cost: Decimal = ZERO
    tokens: int = 0
    charged: bool = False
    exhausted: list[int] = field(default_factory=list)


def window_starts(now: datetime | None = None) -> tuple[datetime, datetime]:
    """The start of the current day and month in ``TIME_ZONE`` (aware datetimes)."""
    local = timezone.localtime(now or timezone.now())
    day = local.replace(hour=0, minute=0, second=0, microsecond=0)
    tz = local.tzinfo  # through naive local time, so a DST change since midnight gets its own offset
    day = timezone.make_aware(day.replace(tzinfo=None), tz)
    month = timezone.make_aware(day.replace(day=1, tzinfo=None), tz)
    return day, month


def start_of(window: str, period_start: datetime, now: datetime | None = None) -> datetime:
    """Where the current window of a budget begins (``period_start`` itself for ``total``)."""
    day, month = window_starts(now)
    if window == BudgetWindow.DAY:
        return day
    return month if window == BudgetWindow.MONTH else period_start


def resets_at(window: str, now: datetime | None = None) -> datetime | None:
    """When the window starts again at zero: the next local midnight or first of the month."""
    day, month = window_starts(now)
    tz = day.tzinfo
    if window == BudgetWindow.DAY:
        following = day.replace(tzinfo=None) + timedelta(days=1)
        return timezone.make_aware(following, tz)
    if window == BudgetWindow.MONTH:
        naive = month.replace(tzinfo=None)
        following = (
            naive.replace(year=naive.year + 1, month=1) if naive.month == 12 else naive.replace(month=naive.month + 1)
        )
        return timezone.make_aware(following, tz)
    return None


@dataclass(frozen=True)
class Use:
    """A budget as it stands now: what its window counts, what calls in flight hold, what is left."""

    budget: Budget
    spent_cost: Decimal
    spent_tokens: int
    runs: int
    reserved_cost: Decimal
    reserved_tokens: int
    resets_at: datetime | None

    @property
    def left_cost(self) -> Decimal | None:
        b = self.budget
        return None if b.max_cost is None else max(b.max_cost - self.spent_cost - self.reserved_cost, ZERO)

    @property
    def left_tokens(self) -> int | None:
        b = self.budget
        return None if b.max_tokens is None else max(b.max_tokens - self.spent_tokens - self.reserved_tokens, 0)

    @property
    def left_runs(self) -> int | None:
        return None if self.budget.max_runs is None else max(self.budget.max_runs - self.runs, 0)


def use(budget: Budget, now: datetime | None = None) -> Use:
    """``budget``'s use in its current window (a passed window counts as zero)."""
    stale = budget.period_start < start_of(budget.window, budget.period_start, now)
    return Use(
        budget,
        ZERO if stale else Decimal(budget.spent_cost),
        0 if stale else budget.spent_tokens,
        0 if stale else budget.runs,
        Decimal(budget.reserved_cost),
        budget.reserved_tokens,
        resets_at(budget.window, now),
    )


@dataclass(frozen=True)
class Refusal:
    """A budget that a reservation (or a run's admission) did not fit: which, on what, how much is left."""

    use: Use
    ceiling: str  # "cost", "tokens" or "runs"

    @property
    def left(self) -> Decimal | int:
        value = {"cost": self.use.left_cost, "tokens": self.use.left_tokens, "runs": self.use.left_runs}[self.ceiling]
        return value if value is not None else 0

    def detail(self) -> dict[str, Any]:
        """What a ``cancel_detail`` and an API answer say of it."""
        budget = self.use.budget
        when = self.use.resets_at
        return {
            "limit": "budget",
            "budget": budget.pk,
            "subject": budget.subject,
            "window": budget.window,
            "ceiling": self.ceiling,
            "left": str(self.left),
            "resets_at": when.isoformat() if when is not None else None,
        }


def covering(owner_id: int | None, agent_version_id: int | None) -> list[int]:
    """The ids of every budget covering a run of ``owner_id`` started from an agent's version
    ``agent_version_id``: the user's, each of the user's groups', the agent's, everyone's.
    Ascending (the lock order)."""
    where = Q(scope=BudgetScope.EVERYONE)
    if owner_id is not None:
        where |= Q(scope=BudgetScope.USER, user_id=owner_id)
        where |= Q(scope=BudgetScope.GROUP, group__user__id=owner_id)
    if agent_version_id is not None:
        where |= Q(scope=BudgetScope.AGENT, agent__versions__id=agent_version_id)
    return sorted(set(Budget.objects.filter(where).values_list("id", flat=True)))


def _fits(u: Use, cost: Decimal, tokens: int, runs: int) -> str | None:
    """The first ceiling of ``u`` that ``cost``/``tokens``/``runs`` do not fit, or ``None``.

    Nothing left never fits, even a zero amount (an admission reserves nothing but must see it)."""
    b = u.budget
    if b.max_cost is not None and (
        u.spent_cost + u.reserved_cost + cost > b.max_cost or u.spent_cost + u.reserved_cost >= b.max_cost
    ):
        return "cost"
    if b.max_tokens is not None and (
        u.spent_tokens + u.reserved_tokens + tokens > b.max_tokens or u.spent_tokens + u.reserved_tokens >= b.max_tokens
    ):
        return "tokens"
    if b.max_runs is not None and u.runs + runs > b.max_runs:
        return "runs"
    return None


# The window a row counts now, and its ceilings' verdicts, on the locked row (FOR UPDATE re-reads
# the newest version after a wait, so these see every committed reservation before this one).
# ``{gate}``: a condition more (a settlement inside a step's fence locks nothing when the fence failed).
_LOCKED = """
    SELECT b.id, w.start,
           CASE WHEN b.period_start < w.start THEN 0 ELSE b.spent_cost END AS cost,
           CASE WHEN b.period_start < w.start THEN 0 ELSE b.spent_tokens END AS tokens,
           CASE WHEN b.period_start < w.start THEN 0 ELSE b.runs END AS runs,
           b.reserved_cost, b.reserved_tokens, b.max_cost, b.max_tokens, b.max_runs
    FROM nrllm_agents_budget b
    CROSS JOIN LATERAL (SELECT CASE b.time_window WHEN 'day' THEN %(day)s::timestamptz
                                                  WHEN 'month' THEN %(month)s::timestamptz
                                                  ELSE b.period_start END AS start) w
    WHERE b.id = ANY(%(ids)s){gate}
    ORDER BY b.id
    FOR UPDATE OF b
"""

_RESERVE_SQL = f"""
WITH locked AS ({_LOCKED.format(gate="")}),
verdict AS (
    SELECT l.*,
        CASE
          WHEN l.max_cost IS NOT NULL AND (l.cost + l.reserved_cost + %(need_cost)s > l.max_cost
                                           OR l.cost + l.reserved_cost >= l.max_cost) THEN 'cost'
          WHEN l.max_tokens IS NOT NULL AND (l.tokens + l.reserved_tokens + %(need_tokens)s > l.max_tokens
                                             OR l.tokens + l.reserved_tokens >= l.max_tokens) THEN 'tokens'
          WHEN l.max_runs IS NOT NULL AND l.runs + %(runs)s > l.max_runs THEN 'runs'
        END AS refused
    FROM locked l
),
upd AS (
    UPDATE nrllm_agents_budget b
    SET spent_cost = v.cost, spent_tokens = v.tokens, runs = v.runs + %(runs)s, period_start = v.start,
        reserved_cost = b.reserved_cost + %(cost)s, reserved_tokens = b.reserved_tokens + %(tokens)s
    FROM verdict v
    WHERE b.id = v.id AND NOT EXISTS (SELECT 1 FROM verdict WHERE refused IS NOT NULL)
    RETURNING b.id
),
held AS (
    INSERT INTO nrllm_agents_budgethold (budget_id, run_id, owner, cost, tokens, created_at)
    SELECT id, %(run)s, %(owner)s, %(cost)s, %(tokens)s, now() FROM upd WHERE %(hold)s
    RETURNING 1
)
SELECT v.id, v.refused, (SELECT count(*) FROM held) FROM verdict v WHERE v.refused IS NOT NULL ORDER BY v.id LIMIT 1
"""


def settlement(gate: str = "") -> str:
    """The settlement's CTEs (``gone``, ``held``, ``locked``, ``upd``: the run's holds go, the
    spend ``%(cost)s``/``%(tokens)s`` counts on the budgets ``%(ids)s``; ``upd`` returns each
    budget's id and whether it is now exhausted), to follow ``WITH`` or another CTE. With
    ``gate`` (a CTE's name), nothing is written unless that CTE returned a row."""
    guard = f" AND EXISTS (SELECT 1 FROM {gate})" if gate else ""
    return f"""
gone AS (
    DELETE FROM nrllm_agents_budgethold WHERE run_id = %(run)s{guard} RETURNING budget_id, cost, tokens
),
held AS (SELECT budget_id, sum(cost) AS cost, sum(tokens) AS tokens FROM gone GROUP BY budget_id),
locked AS ({_LOCKED.format(gate=guard)}),
upd AS (
    UPDATE nrllm_agents_budget b
    SET reserved_cost = GREATEST(b.reserved_cost - COALESCE(h.cost, 0), 0),
        reserved_tokens = GREATEST(b.reserved_tokens - COALESCE(h.tokens, 0), 0),
        spent_cost = l.cost + %(cost)s, spent_tokens = l.tokens + %(tokens)s, runs = l.runs,
        period_start = l.start
    FROM locked l LEFT JOIN held h ON h.budget_id = l.id
    WHERE b.id = l.id
    RETURNING b.id, (b.max_cost IS NOT NULL AND b.spent_cost >= b.max_cost)
                 OR (b.max_tokens IS NOT NULL AND b.spent_tokens >= b.max_tokens) AS exhausted
)"""


_SETTLE_SQL = f"WITH {settlement()} SELECT id FROM upd WHERE exhausted ORDER BY id"


def _params(ids: Sequence[int], now: datetime | None) -> dict[str, Any]:
    day, month = window_starts(now)
    return {"ids": list(ids), "day": day, "month": month}


def settlement_params(
    budget_ids: Sequence[int], run_id: uuid.UUID, cost: Decimal, tokens: int, now: datetime | None = None
) -> dict[str, Any]:
    """The parameters of ``settlement``: the run's spend on ``budget_ids`` in their windows of now."""
    return {**_params(budget_ids, now), "run": run_id, "cost": cost, "tokens": tokens}


def _orm() -> bool:
    return connection.vendor != "postgresql"


def reserve(
    budget_ids: Sequence[int],
    *,
    run_id: uuid.UUID | None = None,
    owner: str = "",
    cost: Decimal = ZERO,
    tokens: int = 0,
    runs: int = 0,
    fit_cost: Decimal = ZERO,
    fit_tokens: int = 0,
    now: datetime | None = None,
    sql: bool | None = None,
) -> Refusal | None:
    """Reserve ``cost`` and ``tokens`` (and count ``runs``) against every budget in ``budget_ids``,
    all or nothing; with ``run_id``, the reservation is held for that run's segment ``owner``
    until ``settle`` (or the reaper) ends it. ``fit_cost`` and ``fit_tokens`` must fit besides,
    but are not reserved (an admission: the worst case of the run's first call).

    Returns ``None`` when it was taken, else the ``Refusal`` of the first budget (by id) it did
    not fit: nothing was written then. ``sql`` forces the PostgreSQL statement (``True``) or
    the ORM path (``False``); by default the engine's own.
    """
    if not budget_ids:
        return None
    if sql if sql is not None else not _orm():
        params = {
            **_params(budget_ids, now),
            "cost": cost,
            "tokens": tokens,
            "need_cost": cost + fit_cost,
            "need_tokens": tokens + fit_tokens,
            "runs": runs,
            "run": run_id,
            "owner": owner,
            "hold": run_id is not None,
        }
        with connection.cursor() as cursor:
            cursor.execute(_RESERVE_SQL, params)
            row = cursor.fetchone()
        if row is None:
            return None
        return Refusal(use(Budget.objects.select_related("user", "group", "agent").get(pk=row[0]), now), row[1])
    with _sqlite_lock, transaction.atomic():
        rows = list(Budget.objects.select_for_update().filter(pk__in=budget_ids).order_by("pk"))
        uses = [use(b, now) for b in rows]
        for u in uses:
            ceiling = _fits(u, cost + fit_cost, tokens + fit_tokens, runs)
            if ceiling is not None:
                return Refusal(
                    use(Budget.objects.select_related("user", "group", "agent").get(pk=u.budget.pk), now), ceiling
                )
        for u in uses:
            b = u.budget
            b.period_start = start_of(b.window, b.period_start, now)
            b.spent_cost, b.spent_tokens, b.runs = u.spent_cost, u.spent_tokens, u.runs + runs
            b.reserved_cost, b.reserved_tokens = u.reserved_cost + cost, u.reserved_tokens + tokens
            b.save(update_fields=_COUNTERS)
        if run_id is not None:
            BudgetHold.objects.bulk_create(
                BudgetHold(budget=u.budget, run_id=run_id, owner=owner, cost=cost, tokens=tokens) for u in uses
            )
    return None


_COUNTERS = ["spent_cost", "spent_tokens", "runs", "reserved_cost", "reserved_tokens", "period_start"]


def settle(
    budget_ids: Sequence[int],
    *,
    run_id: uuid.UUID,
    cost: Decimal = ZERO,
    tokens: int = 0,
    now: datetime | None = None,
    sql: bool | None = None,
) -> list[int]:
    """A model call of ``run_id`` ended: its holds go, its actual ``cost`` and ``tokens`` count on
    every budget in ``budget_ids`` (in the current window). Returns the ids of the budgets now
    exhausted (spent up to a ceiling): the calls in flight that draw on them must stop.

    A hold the reaper already released is not released twice; the spend still counts.
    """
    if not budget_ids:
        return []
    if sql if sql is not None else not _orm():
        with connection.cursor() as cursor:
            cursor.execute(_SETTLE_SQL, settlement_params(budget_ids, run_id, cost, tokens, now))
            return [row[0] for row in cursor.fetchall()]
    exhausted = []
    with _sqlite_lock, transaction.atomic():
        held: dict[int, tuple[Decimal, int]] = {}
        for hold in BudgetHold.objects.filter(run_id=run_id):
            c, t = held.get(hold.budget_id, (ZERO, 0))
            held[hold.budget_id] = (c + hold.cost, t + hold.tokens)
        BudgetHold.objects.filter(run_id=run_id).delete()
        for b in Budget.objects.select_for_update().filter(pk__in=budget_ids).order_by("pk"):
            u = use(b, now)
            c, t = held.get(b.pk, (ZERO, 0))
            b.period_start = start_of(b.window, b.period_start, now)
            b.spent_cost, b.spent_tokens, b.runs = u.spent_cost + cost, u.spent_tokens + tokens, u.runs
            b.reserved_cost, b.reserved_tokens = max(u.reserved_cost - c, ZERO), max(u.reserved_tokens - t, 0)
            b.save(update_fields=_COUNTERS)
            if (b.max_cost is not None and b.spent_cost >= b.max_cost) or (
                b.max_tokens is not None and b.spent_tokens >= b.max_tokens
            ):
                exhausted.append(b.pk)
    return exhausted


def drawing_on(budget_ids: Sequence[int], *, besides: uuid.UUID | None = None) -> list[uuid.UUID]:
    """The runs whose model call in flight holds a reservation on any of ``budget_ids``."""
    holds = BudgetHold.objects.filter(budget_id__in=list(budget_ids))
    if besides is not None:
        holds = holds.exclude(run_id=besides)
    return sorted(set(holds.values_list("run_id", flat=True)), key=str)


def release_dead(now: datetime | None = None) -> int:
    """The reaper's pass: release every hold whose segment no longer executes its run (the run
    is not running, another segment owns it, or its lease expired). Returns the holds released."""
    now = now or timezone.now()
    alive = AgentRun.objects.filter(status=RunStatus.RUNNING, lease_expires__gte=now).values_list("id", "claimed_by")
    live = set(alive.filter(id__in=BudgetHold.objects.values("run_id")))
    dead = [h for h in BudgetHold.objects.all() if (h.run_id, h.owner) not in live]
    if dead:
        _give_back(dead)
    return len(dead)


def release(run_id: uuid.UUID, owner: str) -> int:
    """Give back what the segment ``owner`` of ``run_id`` still holds (its call never ran, or
    its step was not recorded): nothing is charged, and another segment's holds stay. Returns
    the holds released."""
    holds = list(BudgetHold.objects.filter(run_id=run_id, owner=owner))
    if holds:
        _give_back(holds)
    return len(holds)


def _give_back(holds: Sequence[BudgetHold]) -> None:
    """Delete ``holds`` and take what they held off their budgets' reservations (a hold that a
    settlement took meanwhile is not taken off twice)."""
    with serialized(), transaction.atomic():
        gone: dict[int, tuple[Decimal, int]] = {}
        for hold in holds:
            if BudgetHold.objects.filter(pk=hold.pk).delete()[0]:
                c, t = gone.get(hold.budget_id, (ZERO, 0))
                gone[hold.budget_id] = (c + hold.cost, t + hold.tokens)
        for b in Budget.objects.select_for_update().filter(pk__in=list(gone)).order_by("pk"):
            c, t = gone[b.pk]
            b.reserved_cost, b.reserved_tokens = max(b.reserved_cost - c, ZERO), max(b.reserved_tokens - t, 0)
            b.save(update_fields=["reserved_cost", "reserved_tokens"])
