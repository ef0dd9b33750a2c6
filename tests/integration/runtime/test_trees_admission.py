"""A child run is admitted like any run (issue 44, item 4): its owner's create rate limit, the
budgets covering it (its user's, its group's, its agent's), and the tree's ``TREE_MAX_RUNS``.
A refused child starts nothing: its call gets a tool error in the parent's stream, which the
parent's model reads, and the parent goes on. The tree's count holds under a burst of spawns
(threads on PostgreSQL, repeated).

``transaction=True``: children run on executor threads with connections of their own, which
only see committed rows.
"""

from __future__ import annotations

import copy
import threading

import pytest
from django.db import connections

from nrllm_agents import admission
from nrllm_agents.catalog import budgets as budget_catalog
from nrllm_agents.domain import Usage
from nrllm_agents.models import AgentRun, AgentRunEvent, Budget, RunStatus
from nrllm_agents.store import trees as tree_store
from tests import waits
from tests.conftest import race_rounds
from tests.integration.executors.test_queue import no_redis  # noqa: F401  (fixture)
from tests.integration.runtime.test_trees import _running, agent, calls, tree

pytestmark = pytest.mark.django_db(transaction=True)


def boss(n: int) -> None:
    """``boss`` calls ``leaf`` ``n`` times in one turn, then answers."""
    agent("leaf", [{"content": "leaf answer"}])
    agent("boss", [calls("leaf", n), {"content": "boss done"}], ("leaf",))


def answers(run_id) -> list[dict]:
    return [e.payload for e in AgentRunEvent.objects.filter(run_id=run_id, kind="tool").order_by("sequence")]


def finished(runtime, owner, prompt: str = "go"):
    root_id = runtime.enqueue({"agent": "boss", "prompt": prompt}, owner=owner)
    assert waits.wait_local_idle(60)
    root = AgentRun.objects.get(pk=root_id)
    assert (root.status, root.final_text) == (RunStatus.COMPLETED, "boss done")  # it went on after the refusals
    return root


@pytest.mark.parametrize(("scope", "ceiling", "children"), [("user", 3, 2), ("agent", 1, 1)])
def test_children_count_against_the_budgets_covering_them_and_a_refused_one_is_a_tool_error(
    runtime,
    no_redis,  # noqa: F811
    alice,
    scope,
    ceiling,
    children,
):
    """Before: with ``max_runs=3`` one run started all its 5 children, and the budget counted 1;
    an agent's used-up ``max_runs`` stopped every surface but its sub-agent calls."""
    boss(5)
    name = "alice" if scope == "user" else "leaf"
    budget_catalog.set_budget(scope, name, "day", max_runs=ceiling)
    root = finished(runtime, alice)
    below = AgentRun.objects.filter(tree_root_id=root.pk)
    assert below.count() == children and {r.status for r in below} == {RunStatus.COMPLETED}
    assert Budget.objects.get().runs == ceiling  # every run it covers counted, none past it
    given = answers(root.pk)
    assert [a["result"] for a in given].count("leaf answer") == children
    refused = [a for a in given if a["error"]]
    assert len(refused) == 5 - children
    for a in refused:
        assert a["error"].startswith("the sub-agent run was not started: budget of ")
        assert f"0 runs left of {ceiling}" in a["error"]
    # the model read the refusals: they are in the transcript it was sent next
    assert AgentRunEvent.objects.filter(run=root, kind="llm").count() == 2


def test_children_spend_their_owner_s_create_rate(runtime, no_redis, alice, settings):  # noqa: F811
    """Before: one POST made 273 runs in 32 s whatever the rate said."""
    rest = copy.deepcopy(settings.REST_FRAMEWORK)
    rest["DEFAULT_THROTTLE_RATES"]["run_create"] = "3/day"
    settings.REST_FRAMEWORK = rest
    admission.reset()
    boss(5)
    root = finished(runtime, alice)  # enqueued by the runtime: the root spent no attempt
    assert AgentRun.objects.filter(tree_root_id=root.pk).count() == 3
    refused = [a["error"] for a in answers(root.pk) if a["error"]]
    assert len(refused) == 2 and all("creating runs too fast" in e for e in refused)


def test_a_tree_past_tree_max_runs_refuses_its_next_child(runtime, no_redis, alice, settings):  # noqa: F811
    """root -> 3 mids -> 3 leaves each would be 13 runs; ``TREE_MAX_RUNS`` 6 lets 2 leaves start."""
    tree(3, [{"content": "leaf answer"}])
    settings.NRLLM_AGENTS = {**getattr(settings, "NRLLM_AGENTS", {}), "TREE_MAX_RUNS": 6}
    root_id = runtime.enqueue({"agent": "root", "prompt": "plan"}, owner=alice)
    assert waits.wait_local_idle(60)
    root = AgentRun.objects.get(pk=root_id)
    assert (root.status, root.final_text) == (RunStatus.COMPLETED, "root done")
    assert AgentRun.objects.filter(tree_root_id=root_id).count() == 5  # with the root: 6
    refused = list(AgentRunEvent.objects.filter(run__tree_root_id=root_id, kind="tool", payload__result=None))
    assert len(refused) == 7
    assert all("its tree holds 6 runs, at most 6 (TREE_MAX_RUNS)" in e.payload["error"] for e in refused)


@pytest.mark.postgres_only
@pytest.mark.postgres
def test_parallel_spawns_of_one_tree_never_pass_tree_max_runs():
    """Four parents of one tree spawn 5 children each at once under a bound of 10 runs: exactly
    5 children are created (1 root + 4 parents + 5), whichever spawns commit first."""
    rounds = race_rounds(30)
    for _ in range(rounds):
        root = _running("r")
        AgentRun.objects.filter(pk=root.pk).update(status=RunStatus.WAITING_FOR_CHILDREN, claimed_by="")
        mids = [
            _running(f"m{i}", tree_parent=root, tree_root=root, tree_depth=1, tree_call_id=f"c{i}") for i in range(4)
        ]
        barrier = threading.Barrier(len(mids))
        outcomes: list[tree_store.Transition] = []

        def spawn(mid: AgentRun) -> None:
            children = [
                tree_store.Child(f"call_{i}", {"prompt": "leaf", "provider": "scripted"}, {"prompt": "leaf"}, "leaf")
                for i in range(5)
            ]
            try:
                barrier.wait()
                outcomes.append(
                    tree_store.spawn(
                        mid.pk, mid.claimed_by, state={}, iterations=0, usage=Usage(), children=children, max_runs=10
                    )
                )
            finally:
                connections.close_all()

        threads = [threading.Thread(target=spawn, args=(mid,)) for mid in mids]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert len(outcomes) == 4 and all(o.applied for o in outcomes)
        assert AgentRun.objects.filter(tree_root_id=root.pk).count() == 4 + 5
        assert sum(len(o.data["children"]) for o in outcomes) == 5
        assert sum(len(o.data["refused"]) for o in outcomes) == 15
        refused = AgentRunEvent.objects.filter(run__tree_root_id=root.pk, kind="tool")
        assert refused.count() == 15


@pytest.mark.parametrize("who", ["not_named", "named", "in_group"])
def test_a_child_from_an_agent_its_tree_s_user_may_not_use_is_a_tool_error(
    runtime,
    no_redis,  # noqa: F811
    alice,
    who,
):
    """The policy on saved agents asks the root run's owner (issue 48): ``leaf`` names the group
    ``team`` (and alice, in one row); alice's run of the open ``boss`` calls it. Before, every
    child ran."""
    from django.contrib.auth.models import Group

    from nrllm_agents.models import Agent

    boss(1)
    team = Group.objects.create(name="team")
    leaf = Agent.objects.get(name="leaf")
    leaf.allowed_groups.add(team)
    if who == "named":
        leaf.allowed_users.add(alice)
    elif who == "in_group":
        alice.groups.add(team)
    root = finished(runtime, alice)
    children = AgentRun.objects.filter(tree_root_id=root.pk)
    given = answers(root.pk)
    if who == "not_named":
        assert not children.exists()
        assert [a["error"] for a in given] == [
            "the sub-agent run was not started: the run's user may not use agent 'leaf'"
        ]
    else:
        assert [c.status for c in children] == [RunStatus.COMPLETED]
        assert [a["result"] for a in given] == ["leaf answer"]
