"""``manage.py agent_budgets set|list|delete`` and ``agent_run`` refused by a budget (exit 2)."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest
from django.contrib.auth.models import Group

from nrllm_agents.models import AgentRun, Budget
from nrllm_agents.money import pricing
from nrllm_agents.web.display import absolute

from .test_commands import run

pytestmark = pytest.mark.django_db


def test_set_list_and_delete(alice):
    Group.objects.create(name="research")
    ok = run("agent_budgets", "set", "--user", "alice", "--window", "day", "--cost", "5.00")
    assert ok.code == 0 and "created budget" in ok.out
    assert (
        run(
            "agent_budgets", "set", "--group", "research", "--window", "month", "--cost", "200", "--tokens", "50000000"
        ).code
        == 0
    )
    assert run("agent_budgets", "set", "--user", "alice", "--window", "day", "--cost", "6").out.startswith("changed")
    listed = [json.loads(line) for line in run("agent_budgets", "list", "--json").out.splitlines()]
    assert {(b["subject"], b["window"], b["max_cost"]) for b in listed} == {
        ("user alice", "day", "6"),
        ("group research", "month", "200"),
    }
    human = run("agent_budgets", "list").out
    assert "user alice per day: cost 0 spent, 0 reserved of 6 USD" in human
    # the reset reads as every absolute time does (display.absolute, in TIME_ZONE), not as ISO
    resets = next(b["resets_at"] for b in listed if b["window"] == "day")
    assert f"resets at {absolute(resets)}" in human and resets not in human
    assert run("agent_budgets", "delete", "--group", "research").code == 0
    assert Budget.objects.count() == 1


@pytest.mark.parametrize(
    "args",
    [
        ("set", "--user", "nobody", "--window", "day", "--cost", "1"),
        ("set", "--everyone", "--window", "day"),
        ("set", "--everyone", "--window", "day", "--cost", "five"),
        ("set", "--everyone", "--window", "day", "--tokens", "1.5"),
        ("delete", "--everyone"),
    ],
)
def test_bad_input_is_exit_2_and_one_line(args):
    ran = run("agent_budgets", *args)
    assert ran.code == 2 and len(ran.err.strip().splitlines()) == 1
    assert not Budget.objects.exists()


def test_agent_run_refused_by_a_budget_exits_2_with_the_same_words(alice):
    Budget.objects.create(scope="user", user=alice, window="day", max_cost=Decimal("1"), spent_cost=Decimal("1"))
    ran = run("agent_run", "hello", "--owner", "alice")
    assert ran.code == 2 and "budget of user alice per day is exhausted: 0 USD left of 1" in ran.err
    assert not AgentRun.objects.exists()


def test_agent_run_refused_when_what_is_left_cannot_pay_for_its_first_call(alice, settings):
    """Issue 44: 0.02 left of 0.10, a first call's worst case above that (1,000 tokens at 50 per
    million): exit 2 with the words of an exhausted budget, and no run."""
    settings.NRLLM_AGENTS = {**getattr(settings, "NRLLM_AGENTS", {}), "BUDGET_MAX_TOKENS": 1000}
    pricing.set_price(
        model="scripted-demo", provider="scripted", input_per_million=Decimal(50), output_per_million=Decimal(50)
    )
    Budget.objects.create(scope="user", user=alice, window="day", max_cost=Decimal("0.10"), spent_cost=Decimal("0.08"))
    ran = run("agent_run", "hello", "--owner", "alice")
    assert ran.code == 2 and "budget of user alice per day is exhausted: 0.02 USD left of 0.1" in ran.err
    assert not AgentRun.objects.exists()
