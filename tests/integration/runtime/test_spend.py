"""Shared budgets enforced on runs: at admission, before each model call, and on the call in
flight of another run (through the cancel path: ``system``, ``budget_exhausted``)."""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from decimal import Decimal

import pytest
from django.contrib.auth.models import Group
from django.db import connections
from django.utils import timezone

from nrllm_agents.admission.budgets import BudgetRefused
from nrllm_agents.models import AgentRun, AgentRunEvent, Budget, BudgetHold
from nrllm_agents.money import pricing
from nrllm_agents.runtime.agent_runtime import Outcome

pytestmark = pytest.mark.django_db

PER_TOKEN = Decimal(1000)  # per million: a thousandth of a unit a token


@pytest.fixture
def priced(settings):
    settings.NRLLM_AGENTS = {**getattr(settings, "NRLLM_AGENTS", {}), "BUDGET_MAX_TOKENS": 100}
    pricing.set_price(
        model="scripted-demo", provider="scripted", input_per_million=PER_TOKEN, output_per_million=PER_TOKEN
    )


def turn(completion: int, **extra) -> dict:
    return {"usage": {"prompt_tokens": 10, "completion_tokens": completion}, **extra}


CALC = {"name": "calculator", "arguments": {"expression": "1+1"}}


def test_a_run_is_refused_at_admission_naming_the_budget_what_is_left_and_when_it_resets(runtime, alice, priced):
    Budget.objects.create(scope="user", user=alice, window="day", max_cost=Decimal("5.00"), spent_cost=Decimal("5"))
    with pytest.raises(BudgetRefused) as caught:
        runtime.run({"prompt": "p", "script": [turn(1, content="x")]}, owner=alice)
    text = str(caught.value)
    assert "budget of user alice per day is exhausted" in text and "0 USD left of 5" in text and "resets at" in text
    assert caught.value.subject()["budget"]["ceiling"] == "cost"
    with pytest.raises(BudgetRefused):
        runtime.enqueue({"prompt": "p"}, owner=alice)
    # another user is not covered by alice's budget
    assert Budget.objects.get().runs == 0


def test_a_call_that_does_not_fit_ends_the_run_before_it_starts(runtime, alice, priced, tmp_path, monkeypatch):
    monkeypatch.setenv("NRLLM_CALL_JOURNAL", str(tmp_path / "j.jsonl"))
    team = Group.objects.create(name="research")
    alice.groups.add(team)
    budget = Budget.objects.create(scope="group", group=team, window="month", max_tokens=300)
    script = [turn(100, tool_calls=[CALC]), turn(100, tool_calls=[CALC]), turn(1, content="done")]
    result = runtime.run({"prompt": "p", "tools": ["calculator"], "script": script}, owner=alice)
    assert result.outcome == Outcome.CANCELLED
    run = runtime.status(result.run_id)
    assert (run.status, run.termination_reason, run.cancel_source) == ("cancelled", "budget_exhausted", "system")
    assert "budget of group research per month is exhausted" in run.cancel_reason
    kinds = [e.kind for e in runtime.events(result.run_id)]
    assert kinds.count("llm") == 2 and kinds[-1] == "cancelled"  # the third call never started
    ack = runtime.events(result.run_id)[-1].payload
    assert ack["termination_reason"] == "budget_exhausted" and ack["limit"]["budget"] == budget.pk
    lines = (tmp_path / "j.jsonl").read_text().splitlines()
    assert sum('"model"' in line for line in lines) == 2
    budget.refresh_from_db()
    assert budget.spent_tokens == 220 and budget.reserved_tokens == 0 and budget.runs == 1
    assert not BudgetHold.objects.exists()


@pytest.mark.postgres_only
@pytest.mark.django_db(transaction=True)  # two runs on two threads, each its own connection; NOTIFY needs commits
def test_a_budget_exhausted_by_one_run_interrupts_the_call_in_flight_of_another(runtime, alice, bob, priced):
    team = Group.objects.create(name="research")
    team.user_set.add(alice, bob)
    budget = Budget.objects.create(scope="group", group=team, window="day", max_cost=Decimal("1.00"))
    outcome: dict = {}

    def streaming() -> None:
        try:
            script = [turn(50, content="a long answer that streams for a while " * 4, delay=20)]
            outcome["b"] = runtime.run({"prompt": "p", "script": script}, owner=bob)
        finally:
            connections.close_all()

    second = threading.Thread(target=streaming)
    second.start()
    deadline = time.monotonic() + 30
    while not BudgetHold.objects.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(0.3)  # the call streams
    first = runtime.run({"prompt": "p", "script": [turn(1000, content="costly")]}, owner=alice)
    assert first.outcome == Outcome.COMPLETED  # its call had fit its reservation when it started
    stopped = time.monotonic()
    second.join(timeout=30)
    assert not second.is_alive() and time.monotonic() - stopped < 10  # long before the 20 s call's end
    b = runtime.status(outcome["b"].run_id)
    assert (b.status, b.termination_reason, b.cancel_source) == ("cancelled", "budget_exhausted", "system")
    llm = AgentRunEvent.objects.filter(run_id=b.pk, kind="llm").get()
    assert llm.payload["interrupted"] is True  # the interrupted step is recorded, with its partial spend
    budget.refresh_from_db()
    assert budget.reserved_cost == 0 and not BudgetHold.objects.exists()
    assert budget.spent_cost >= Decimal("1.01")


def test_the_reaper_makes_a_budget_whole_again(runtime, alice, priced):
    from nrllm_agents import store
    from nrllm_agents.store import budgets

    budget = Budget.objects.create(scope="everyone", window="total", max_cost=Decimal("1"))
    run = store.begin(
        {"prompt": "p", "provider": "scripted", "owner": alice},
        claimed_by="w:dead",
        lease_expires=timezone.now() - timedelta(seconds=60),
    )
    assert budgets.reserve([budget.pk], run_id=run.pk, owner="w:dead", cost=Decimal("0.9")) is None
    assert budgets.reserve([budget.pk], runs=1, cost=Decimal("0.2")) is not None
    report = runtime.reap()
    assert report.holds_released == 1
    budget.refresh_from_db()
    assert budget.reserved_cost == 0 and budget.spent_cost == 0


def test_a_segment_whose_lease_was_taken_before_its_step_charges_nothing_and_records_nothing(runtime, alice, priced):
    """Issue 44: the call's spend and its step are one fence. Here the lease goes to another
    segment while the call's step is on its way to the store (the step observer runs first)."""
    budget = Budget.objects.create(scope="everyone", window="total", max_cost=Decimal("5"))

    def take_the_lease(step: dict) -> None:
        if step["kind"] == "llm":
            AgentRun.objects.filter(pk=step["run_id"]).update(claimed_by="worker:elsewhere:1:0001")

    result = runtime.run({"prompt": "p", "script": [turn(50, content="x")]}, owner=alice, on_step=take_the_lease)
    assert result.outcome == Outcome.LEASE_LOST
    assert [e.kind for e in runtime.events(result.run_id)] == ["request"]  # no step recorded
    budget.refresh_from_db()
    assert (budget.spent_cost, budget.spent_tokens) == (0, 0)  # and nothing charged
    assert budget.reserved_cost == 0 and not BudgetHold.objects.exists()  # its reservation given back


def test_a_run_is_refused_at_admission_when_what_is_left_cannot_pay_for_its_first_call(runtime, alice, priced):
    """Issue 44: 0.02 left, a first call's worst case about 0.1 (its prompt and 100 tokens at a
    thousandth each): refused, nothing counted, naming the budget as an exhausted one does."""
    budget = Budget.objects.create(
        scope="user", user=alice, window="day", max_cost=Decimal("0.10"), spent_cost=Decimal("0.08")
    )
    with pytest.raises(BudgetRefused) as caught:
        runtime.enqueue({"prompt": "p", "script": [turn(1, content="x")]}, owner=alice)
    assert "budget of user alice per day is exhausted: 0.02 USD left of 0.1" in str(caught.value)
    assert caught.value.subject()["budget"]["ceiling"] == "cost"
    budget.refresh_from_db()
    assert budget.runs == 0 and not AgentRun.objects.exists()
    budget.max_cost = Decimal("0.20")  # room for one call's worst case: admitted
    budget.save()
    runtime.enqueue({"prompt": "p", "script": [turn(1, content="x")]}, owner=alice)
    budget.refresh_from_db()
    assert budget.runs == 1 and budget.reserved_cost == 0
