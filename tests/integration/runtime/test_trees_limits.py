"""A run's limits bound its whole tree (issue 36): a child starts with what remains of its
ancestors' ``max_cost``, ``max_total_tokens`` and deadline, and the tree stops once its summed
spend passes a limit, every run cancelled with the limit's reason (PostgreSQL and SQLite).

``transaction=True`` where children run: they run on executor threads with connections of their
own, which only see committed rows.
"""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from nrllm_agents.catalog import agents as catalog
from nrllm_agents.domain import Usage
from nrllm_agents.models import AgentRun, AgentRunEvent, RunStatus
from nrllm_agents.money import pricing
from nrllm_agents.store import runs as run_store
from nrllm_agents.store import trees as tree_store
from tests import waits
from tests.integration.executors.test_queue import no_redis  # noqa: F401  (fixture)
from tests.integration.runtime.test_trees import agent, calls, runs_of

PER_TOKEN = Decimal(1000)  # per million: a thousandth a token, 0.1 a turn of 100 tokens


@pytest.fixture
def priced() -> None:
    pricing.set_price(
        model="scripted-demo", provider="scripted", input_per_million=PER_TOKEN, output_per_million=PER_TOKEN
    )


def turn(**extra) -> dict:
    """A model answer of 100 tokens (0.1 at ``PER_TOKEN``)."""
    return {"usage": {"prompt_tokens": 10, "completion_tokens": 90}, **extra}


CALC = {"name": "calculator", "arguments": {"expression": "1+1"}}


@pytest.mark.django_db(transaction=True)
def test_a_root_s_max_cost_stops_the_tree_its_children_spend_past_together(runtime, no_redis, priced):  # noqa: F811
    """Each child spends 0.3 before a slow answer, under its share (0.9); four of them with the
    root's 0.1 pass the root's 1.0: the tree stops, every run cancelled for the cost limit, the
    children naming the root's cancel, and nothing started after any run's boundary."""
    script = [turn(tool_calls=[CALC]) for _ in range(3)] + [{"delay": 20, "content": "never " * 40}]
    definition = {"provider": "scripted", "script": script, "tools": ["calculator"]}
    catalog.save("worker", definition, description="works")
    agent("boss", [turn(**calls("worker", 4)), turn(content="never")], ("worker",))
    root_id = runtime.enqueue({"agent": "boss", "prompt": "spend", "max_cost": "1.0"})
    assert waits.wait_local_idle(60)
    root = AgentRun.objects.get(pk=root_id)
    assert (root.status, root.termination_reason, root.cancel_source) == ("cancelled", "cost_exceeded", "system")
    assert root.cancel_detail["limit"] == "max_cost" and root.cancel_detail["tree"] == str(root_id)
    assert Decimal(root.cancel_detail["measured"]) > Decimal("1.0")
    assert "cost limit of its tree exceeded" in root.cancel_reason
    children = list(AgentRun.objects.filter(tree_parent_id=root_id))
    assert len(children) == 4
    total = root.cost
    for child in children:
        assert child.max_cost == Decimal("0.9")  # what remained of the root's when it was created
        assert (child.status, child.termination_reason) == ("cancelled", "cost_exceeded"), child
        assert (child.cost or 0) < child.max_cost  # each under its own limit
        total += child.cost or 0
    assert total > Decimal("1.0")
    for run in runs_of(root_id):
        stream = list(AgentRunEvent.objects.filter(run=run).order_by("sequence"))
        ack = stream[-1]
        assert ack.kind == "cancelled" and [e.kind for e in stream].count("cancelled") == 1
        assert ack.payload["termination_reason"] == "cost_exceeded"
        if run.pk != root_id:
            inherited = ack.payload["inherited"]
            assert (inherited["run_id"], inherited["source"]) == (str(root_id), "system")
            assert inherited["limit"]["limit"] == "max_cost" and inherited["limit"]["value"] == "1"
        # nothing after the boundary: the cancelled step follows the step it names
        assert ack.payload["boundary_sequence"] == stream[-2].sequence
    # the root's turn that would have answered its calls never ran
    assert not AgentRunEvent.objects.filter(run_id=root_id, kind="tool").exists()


@pytest.mark.django_db(transaction=True)
def test_a_root_s_token_budget_bounds_its_tree_and_a_child_that_spends_it_stops_the_tree(runtime, no_redis):  # noqa: F811
    """One child whose own script would spend 500 tokens, under a root's 300: it starts with 200
    (what remained), and the boundary that passes the root's budget stops the whole tree."""
    script = [turn(tool_calls=[CALC]) for _ in range(4)] + [turn(content="x")]
    catalog.save("eater", {"provider": "scripted", "script": script, "tools": ["calculator"]}, description="eats")
    agent("boss", [turn(**calls("eater", 1)), turn(content="never")], ("eater",))
    root_id = runtime.enqueue({"agent": "boss", "prompt": "spend", "max_total_tokens": 300})
    assert waits.wait_local_idle(60)
    root = AgentRun.objects.get(pk=root_id)
    child = AgentRun.objects.get(tree_parent_id=root_id)
    assert child.max_total_tokens == 200
    assert (root.status, root.termination_reason) == ("cancelled", "budget_exceeded")
    assert root.cancel_detail == {
        "limit": "max_total_tokens",
        "value": 300,
        "measured": 400,
        "unit": "tokens",
        "tree": str(root_id),
    }
    assert (child.status, child.termination_reason, child.total_tokens) == ("cancelled", "budget_exceeded", 300)
    assert child.cancel_detail["inherited"]["run_id"] == str(root_id)
    assert AgentRunEvent.objects.filter(run=child, kind="llm").count() == 3  # the fourth call never started


def _running(owner: str, **fields) -> AgentRun:
    return run_store.begin({"prompt": "p", "provider": "scripted", **fields}, claimed_by=owner)


def _child(call_id: str, **own) -> tree_store.Child:
    fields = {"prompt": "leaf", "provider": "scripted", "max_cost": None, "max_total_tokens": None, **own}
    return tree_store.Child(call_id, fields, {"prompt": "leaf"})


@pytest.mark.django_db
def test_a_child_starts_with_what_remains_of_each_ancestor_s_limits():
    """The root spent 0.3 of its 1.0 and 100 of its 1000 tokens; the middle run spawning (its own
    0.45) spent 0.1 and 100 tokens, a sibling of it 0.2 and 150: a leaf asking for more gets the
    tightest of what remains, one asking for less keeps its own; the deadline is the earliest."""
    deadline = timezone.now() + timedelta(seconds=60)
    root = _running("r", max_cost=Decimal("1.0"), max_total_tokens=1000, deadline_seconds=60, deadline_at=deadline)
    AgentRun.objects.filter(pk=root.pk).update(
        status=RunStatus.WAITING_FOR_CHILDREN, claimed_by="", cost=Decimal("0.3"), prompt_tokens=100
    )
    place = {"tree_parent": root, "tree_root": root, "tree_depth": 1}
    mid = _running("m", **place, tree_call_id="m", max_cost=Decimal("0.45"))
    _running("s", **place, tree_call_id="s", cost=Decimal("0.2"), prompt_tokens=150)
    later = timezone.now() + timedelta(hours=1)
    children = [
        _child("greedy", max_cost=Decimal("5"), max_total_tokens=100000, deadline_seconds=3600, deadline_at=later),
        _child("frugal", max_cost=Decimal("0.05"), max_total_tokens=10),
        _child("unbounded"),
    ]
    spent = Usage(50, 50, cost=Decimal("0.1"))  # the middle run's, written by the spawn itself
    fence = tree_store.spawn(mid.pk, "m", state={}, iterations=1, usage=spent, children=children)
    assert fence.applied
    made = {r.tree_call_id: r for r in AgentRun.objects.filter(tree_parent_id=mid.pk)}
    # the middle run's 0.45 - 0.1 is tighter than the root's 1.0 - (0.3 + 0.1 + 0.2);
    # tokens: only the root's, 1000 - (100 + 100 + 150)
    for name in ("greedy", "unbounded"):
        assert (made[name].max_cost, made[name].max_total_tokens) == (Decimal("0.35"), 650), name
        assert made[name].deadline_at == deadline and 0 < made[name].deadline_seconds <= 60
        assert made[name].request_payload["max_cost"] == "0.35"
        assert made[name].request_payload["deadline_seconds"] == made[name].deadline_seconds
    assert (made["frugal"].max_cost, made["frugal"].max_total_tokens) == (Decimal("0.05"), 10)


@pytest.mark.django_db(transaction=True)
def test_a_root_s_deadline_bounds_its_children(runtime, no_redis):  # noqa: F811
    """A child whose own deadline is an hour starts with what remains of the root's 2 s: its slow
    call is cut short at that deadline, its parent gets the tool error and stops at its own."""
    catalog.save(
        "slow",
        {"provider": "scripted", "script": [{"delay": 30, "content": "late"}], "deadline_seconds": 3600},
        description="slow",
    )
    agent("boss", [calls("slow", 1), {"content": "never"}], ("slow",))
    root_id = runtime.enqueue({"agent": "boss", "prompt": "hurry", "deadline_seconds": 2})
    assert waits.wait_local_idle(60)
    root = AgentRun.objects.get(pk=root_id)
    child = AgentRun.objects.get(tree_parent_id=root_id)
    assert child.deadline_seconds <= 2 and child.deadline_at <= root.deadline_at
    assert (child.status, child.termination_reason) == ("cancelled", "deadline_exceeded")
    assert (root.status, root.termination_reason) == ("cancelled", "deadline_exceeded")
    assert child.stopped_at - child.created_at < timedelta(seconds=20)  # not the hour it asked for


@pytest.mark.django_db(transaction=True)
def test_a_child_that_fails_or_hits_its_own_limit_is_a_tool_error_and_its_parent_completes(runtime, no_redis):  # noqa: F811
    """Ends of its own (not a cancel from above): each answers its call with a tool error saying
    how it ended, and the parent goes on."""
    broken = {"expect": [{"role": "user", "content": "something else"}], "content": "never"}
    catalog.save("broken", {"provider": "scripted", "script": [broken]}, description="fails")
    greedy = [turn(tool_calls=[CALC]) for _ in range(3)] + [turn(content="never")]
    definition = {"provider": "scripted", "script": greedy, "tools": ["calculator"], "max_total_tokens": 150}
    catalog.save("greedy", definition, description="spends")
    both = {
        "tool_calls": [
            {"name": "broken", "arguments": {"prompt": "a"}},
            {"name": "greedy", "arguments": {"prompt": "b"}},
        ]
    }
    agent("boss", [both, {"content": "went on"}], ("broken", "greedy"))
    root_id = runtime.enqueue({"agent": "boss", "prompt": "delegate"})
    assert waits.wait_local_idle(60)
    root = AgentRun.objects.get(pk=root_id)
    assert (root.status, root.final_text) == (RunStatus.COMPLETED, "went on")
    failed = AgentRun.objects.get(tree_parent_id=root_id, agent_snapshot__name="broken")
    limited = AgentRun.objects.get(tree_parent_id=root_id, agent_snapshot__name="greedy")
    assert failed.status == RunStatus.FAILED
    assert (limited.status, limited.termination_reason) == ("cancelled", "budget_exceeded")
    assert "tree" not in limited.cancel_detail  # its own limit, as any run's
    tools = {e.payload["name"]: e.payload for e in AgentRunEvent.objects.filter(run_id=root_id, kind="tool")}
    assert tools["broken"]["result"] is None and f"{failed.pk} ended failed" in tools["broken"]["error"]
    assert tools["greedy"]["result"] is None and "budget_exceeded" in tools["greedy"]["error"]
    assert "token budget exceeded" in tools["greedy"]["error"]
