"""The shared budgets' statements: all-or-nothing reservations, settlements (alone, and in a step's
fence), windows on calendar boundaries in TIME_ZONE, and the reaper's release (PostgreSQL and
SQLite)."""

from __future__ import annotations

import threading
import uuid
from datetime import datetime
from decimal import Decimal
from zoneinfo import ZoneInfo

import pytest
from django.contrib.auth.models import Group
from django.db import connection, connections
from django.utils import timezone

from nrllm_agents import store
from nrllm_agents.domain import Step, StepKind
from nrllm_agents.models import AgentRun, AgentRunEvent, Budget, BudgetHold, RunStatus
from nrllm_agents.store import budgets
from tests.conftest import race_rounds
from tests.integration.runs import failing

pytestmark = pytest.mark.django_db

PARIS = ZoneInfo("Europe/Paris")


def everyone(**ceilings) -> Budget:
    return Budget.objects.create(scope="everyone", window=ceilings.pop("window", "day"), **ceilings)


def a_run(owner=None, *, claimed_by: str = "w:1", running: bool = True) -> AgentRun:
    fields = {"prompt": "p", "provider": "scripted", "owner": owner}
    if running:
        return store.begin(fields, claimed_by=claimed_by, lease_expires=store.lease_until())
    return store.create_queued(fields, {"prompt": "p"})


def counters(budget: Budget) -> tuple:
    budget.refresh_from_db()
    return (budget.spent_cost, budget.spent_tokens, budget.runs, budget.reserved_cost, budget.reserved_tokens)


def engine_paths() -> list[bool]:
    """The PostgreSQL statement and the ORM path on PostgreSQL; the ORM path alone on SQLite."""
    return [True, False] if connection.vendor == "postgresql" else [False]


@pytest.mark.parametrize("sql", [pytest.param(True, marks=pytest.mark.postgres_only), False])
def test_a_reservation_is_all_or_nothing_over_the_covering_budgets(sql, alice):
    team = Group.objects.create(name="research")
    alice.groups.add(team)
    mine = Budget.objects.create(scope="user", user=alice, window="day", max_cost=Decimal("1.00"))
    ours = Budget.objects.create(scope="group", group=team, window="month", max_cost=Decimal("0.30"))
    all_ = everyone(window="total", max_tokens=1000)
    ids = budgets.covering(alice.pk, None)
    assert ids == sorted([mine.pk, ours.pk, all_.pk])
    run = a_run(alice)
    assert budgets.reserve(ids, run_id=run.pk, owner="w:1", cost=Decimal("0.25"), tokens=400, sql=sql) is None
    refused = budgets.reserve(ids, run_id=run.pk, owner="w:1", cost=Decimal("0.10"), tokens=10, sql=sql)
    assert refused is not None and refused.use.budget.pk == ours.pk and refused.ceiling == "cost"
    assert refused.left == Decimal("0.05")
    # nothing of the refused one was written, on any budget
    assert counters(mine)[3:] == (Decimal("0.25"), 400) and counters(all_)[3:] == (Decimal("0.25"), 400)
    assert BudgetHold.objects.count() == 3
    # the call ends: its actual cost replaces the reservation everywhere
    assert budgets.settle(ids, run_id=run.pk, cost=Decimal("0.30"), tokens=120, sql=sql) == [ours.pk]
    assert counters(ours) == (Decimal("0.30"), 120, 0, 0, 0)
    assert counters(all_) == (Decimal("0.30"), 120, 0, 0, 0) and BudgetHold.objects.count() == 0


@pytest.mark.postgres_only  # compares the PostgreSQL statement with the ORM path
def test_the_statement_and_the_orm_path_write_the_same_rows(alice):
    seen = []
    for sql in (True, False):
        Budget.objects.all().delete()
        b = everyone(max_cost=Decimal("1"), max_tokens=100, max_runs=3)
        run = a_run(alice)
        assert budgets.reserve([b.pk], runs=1, sql=sql) is None
        assert budgets.reserve([b.pk], run_id=run.pk, owner="w:1", cost=Decimal("0.2"), tokens=50, sql=sql) is None
        mid = counters(b)
        budgets.settle([b.pk], run_id=run.pk, cost=Decimal("0.1"), tokens=30, sql=sql)
        seen.append((mid, counters(b), b.period_start))
    assert seen[0][:2] == seen[1][:2]


def test_admission_sees_nothing_left_and_counts_runs(alice):
    b = everyone(max_cost=Decimal("0.10"), max_runs=2)
    assert budgets.reserve([b.pk], runs=1) is None
    assert budgets.reserve([b.pk], runs=1) is None
    refused = budgets.reserve([b.pk], runs=1)
    assert refused is not None and refused.ceiling == "runs" and refused.left == 0
    b.max_runs = None
    b.save()
    run = a_run(alice)
    budgets.reserve([b.pk], run_id=run.pk, owner="w:1", cost=Decimal("0.04"))
    budgets.settle([b.pk], run_id=run.pk, cost=Decimal("0.10"))
    refused = budgets.reserve([b.pk], runs=1)  # a zero amount does not fit a spent budget
    assert refused is not None and refused.ceiling == "cost"


@pytest.mark.parametrize("sql", [pytest.param(True, marks=pytest.mark.postgres_only), False])
def test_windows_reset_exactly_at_local_midnight_and_the_first_of_the_month(sql, settings, alice):
    settings.TIME_ZONE = "Europe/Paris"
    daily = everyone(window="day", max_cost=Decimal("1"))
    monthly = everyone(window="month", max_cost=Decimal("1"))
    total = everyone(window="total", max_cost=Decimal("10"))
    ids = [daily.pk, monthly.pk, total.pk]
    Budget.objects.update(period_start=datetime(2026, 1, 1, tzinfo=PARIS))
    run = a_run(alice)

    def spend(at: datetime) -> None:
        assert budgets.reserve(ids, run_id=run.pk, owner="w:1", cost=Decimal("0.5"), now=at, sql=sql) is None
        budgets.settle(ids, run_id=run.pk, cost=Decimal("0.5"), now=at, sql=sql)

    def spent() -> list[Decimal]:
        return [budgets.use(Budget.objects.get(pk=i), now=now).spent_cost for i in ids]

    # 23:59:59.999999 in Paris on Jan 31 is 22:59:59 UTC: still Jan 31 there
    now = datetime(2026, 1, 31, 23, 59, 59, 999999, tzinfo=PARIS)
    spend(now)
    spend(now)
    assert spent() == [Decimal("1"), Decimal("1"), Decimal("1")]
    assert budgets.reserve([daily.pk], cost=Decimal("0.01"), now=now, sql=sql) is not None
    assert budgets.use(daily, now=now).resets_at == datetime(2026, 2, 1, tzinfo=PARIS)
    assert budgets.use(monthly, now=now).resets_at == datetime(2026, 2, 1, tzinfo=PARIS)
    # one microsecond later it is February in Paris (still January 31 in UTC): both reset there
    now = datetime(2026, 2, 1, 0, 0, 0, tzinfo=PARIS)
    assert now.astimezone(ZoneInfo("UTC")).day == 31
    assert spent() == [Decimal("0"), Decimal("0"), Decimal("1")]
    spend(now)
    assert spent() == [Decimal("0.5"), Decimal("0.5"), Decimal("1.5")]
    # the next local midnight resets the day only
    now = datetime(2026, 2, 2, 0, 0, tzinfo=PARIS)
    spend(now)
    assert spent() == [Decimal("0.5"), Decimal("1.0"), Decimal("2.0")]
    assert budgets.use(Budget.objects.get(pk=daily.pk), now=now).resets_at == datetime(2026, 2, 3, tzinfo=PARIS)


def test_the_reaper_releases_what_a_dead_segment_held(alice):
    b = everyone(max_cost=Decimal("1"))
    alive, dead, gone = a_run(alice, claimed_by="w:alive"), a_run(alice, claimed_by="w:dead"), a_run(alice)
    for run in (alive, dead, gone):
        assert budgets.reserve([b.pk], run_id=run.pk, owner=run.claimed_by, cost=Decimal("0.3")) is None
    AgentRun.objects.filter(pk=dead.pk).update(lease_expires="2000-01-01T00:00:00Z")
    AgentRun.objects.filter(pk=gone.pk).update(claimed_by="w:other")  # requeued and claimed again
    assert budgets.release_dead() == 2
    assert counters(b)[3] == Decimal("0.3")
    assert list(BudgetHold.objects.values_list("run_id", flat=True)) == [alive.pk]
    assert budgets.release_dead() == 0
    # a settle after the reaper released its hold still counts its spend, once
    budgets.settle([b.pk], run_id=dead.pk, cost=Decimal("0.2"))
    assert counters(b)[0] == Decimal("0.2") and counters(b)[3] == Decimal("0.3")


@pytest.mark.postgres_only
@pytest.mark.django_db(transaction=True)  # the racing threads use their own connections and must see commits
def test_concurrent_reservations_never_overspend(alice):
    """24 threads reserve and settle against one budget, many rounds: the budget's spend never
    passes its ceiling, and what is reserved plus spent never does either."""
    ceiling = Decimal("1.00")
    runs = [a_run(alice, claimed_by=f"w:{i}") for i in range(24)]
    for round_ in range(race_rounds(8)):
        Budget.objects.all().delete()
        b = everyone(max_cost=ceiling)
        barrier = threading.Barrier(len(runs))
        errors: list[BaseException] = []

        def draw(run: AgentRun, seed: int) -> None:
            try:
                barrier.wait()
                for call in range(20):
                    cost = Decimal("0.01") * (1 + (seed + call) % 5)  # 0.01 .. 0.05
                    if budgets.reserve([b.pk], run_id=run.pk, owner=run.claimed_by, cost=cost) is not None:
                        return
                    budgets.settle([b.pk], run_id=run.pk, cost=cost)  # never more than reserved here
            except BaseException as exc:  # noqa: BLE001 (reported below)
                errors.append(exc)
            finally:
                connections.close_all()

        threads = [threading.Thread(target=draw, args=(run, i + round_)) for i, run in enumerate(runs)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        assert not errors, errors
        spent, _, _, reserved, _ = counters(b)
        assert reserved == 0 and BudgetHold.objects.count() == 0
        assert Decimal("0.95") < spent <= ceiling  # filled up to the ceiling, never past it


def test_no_budget_means_no_statement(alice, django_assert_num_queries):
    with django_assert_num_queries(0):
        assert budgets.reserve([], run_id=uuid.uuid4(), owner="w", cost=Decimal(1)) is None
        assert budgets.settle([], run_id=uuid.uuid4(), cost=Decimal(1)) == []
    assert RunStatus.RUNNING  # (the module's statuses import cleanly)


# --- a model call's spend charged in its step's fence (issue 44, item 14) --------------------
def llm_step() -> Step:
    return Step(StepKind.LLM, 0, {"usage": {"prompt_tokens": 10, "completion_tokens": 20}})


def test_a_step_s_fence_charges_its_spend_with_it_and_only_with_it(store_path, alice):
    b = everyone(max_cost=Decimal("1"), max_tokens=1000)
    run = a_run(alice, claimed_by="w:1")
    assert budgets.reserve([b.pk], run_id=run.pk, owner="w:1", cost=Decimal("0.4"), tokens=400) is None
    # another segment's boundary: nothing is appended, nothing charged, the hold stays
    theirs = budgets.Charge([b.pk], Decimal("0.3"), 30)
    assert store.record_step(run.pk, "w:2", 0, llm_step(), timezone.now(), theirs) is store.Lease.NOT_HELD
    assert store.append_owned(run.pk, "w:2", 0, llm_step(), timezone.now(), theirs) is store.Lease.NOT_HELD
    assert not theirs.charged and not AgentRunEvent.objects.filter(run_id=run.pk).exists()
    assert counters(b) == (0, 0, 0, Decimal("0.4"), 400) and BudgetHold.objects.count() == 1
    # the owner's: appended and charged in one commit; the spend exhausts the token ceiling
    ours = budgets.Charge([b.pk], Decimal("0.3"), 1000)
    assert store.record_step(run.pk, "w:1", 0, llm_step(), timezone.now(), ours) is store.Lease.HELD
    assert (ours.charged, ours.exhausted) == (True, [b.pk])
    assert counters(b) == (Decimal("0.3"), 1000, 0, 0, 0) and not BudgetHold.objects.exists()
    assert AgentRunEvent.objects.filter(run_id=run.pk, kind="llm").count() == 1


def test_the_step_in_flight_of_a_run_cancelled_while_ours_is_charged_with_it(store_path, alice):
    b = everyone(max_cost=Decimal("1"))
    run = a_run(alice, claimed_by="w:1")
    assert budgets.reserve([b.pk], run_id=run.pk, owner="w:1", cost=Decimal("0.4")) is None
    store.cancel(run.pk, source="api")
    charge = budgets.Charge([b.pk], Decimal("0.1"), 5)
    assert store.record_step(run.pk, "w:1", 0, llm_step(), timezone.now(), charge) is store.Lease.NOT_HELD
    assert not charge.charged and counters(b)[0] == 0
    assert store.append_owned(run.pk, "w:1", 0, llm_step(), timezone.now(), charge) is store.Lease.HELD
    assert charge.charged and counters(b) == (Decimal("0.1"), 5, 0, 0, 0)


def test_a_step_s_fence_that_fails_charges_nothing(store_path, alice):
    b = everyone(max_cost=Decimal("1"))
    run = a_run(alice, claimed_by="w:1")
    charge = budgets.Charge([b.pk], Decimal("0.1"), 5)
    with failing("WITH", "UPDATE", "INSERT"):
        assert store.record_step(run.pk, "w:1", 0, llm_step(), timezone.now(), charge) is store.Lease.UNKNOWN
    assert not charge.charged and counters(b)[0] == 0 and not AgentRunEvent.objects.filter(run_id=run.pk).exists()


def test_a_segment_gives_back_only_its_own_reservation(alice):
    b = everyone(max_cost=Decimal("1"))
    run = a_run(alice, claimed_by="w:new")
    assert budgets.reserve([b.pk], run_id=run.pk, owner="w:old", cost=Decimal("0.2")) is None
    assert budgets.reserve([b.pk], run_id=run.pk, owner="w:new", cost=Decimal("0.3")) is None
    assert budgets.release(run.pk, "w:old") == 1
    assert counters(b) == (0, 0, 0, Decimal("0.3"), 0)
    assert list(BudgetHold.objects.values_list("owner", flat=True)) == ["w:new"]


@pytest.mark.parametrize("sql", [pytest.param(True, marks=pytest.mark.postgres_only), False])
def test_admission_needs_room_for_what_must_fit_and_reserves_none_of_it(sql, alice):
    b = everyone(max_cost=Decimal("0.10"), max_tokens=1000)
    refused = budgets.reserve([b.pk], runs=1, fit_cost=Decimal("0.11"), sql=sql)
    assert refused is not None and refused.ceiling == "cost" and refused.left == Decimal("0.10")
    refused = budgets.reserve([b.pk], runs=1, fit_tokens=1001, sql=sql)
    assert refused is not None and refused.ceiling == "tokens"
    assert budgets.reserve([b.pk], runs=1, fit_cost=Decimal("0.10"), fit_tokens=1000, sql=sql) is None
    assert counters(b) == (0, 0, 1, 0, 0)  # counted one run, reserved nothing
