"""Agents that call agents: child runs, the parent waiting without a worker, one cancel for the
tree (issue 36). Real database, real threads of the in-process executor (PostgreSQL and SQLite);
the race of a cancel against a spawn runs on PostgreSQL only (row locks across threads).

``transaction=True`` throughout: children run on executor threads with connections of their own,
which only see committed rows.
"""

from __future__ import annotations

import threading
import time
import uuid

import pytest
from django.db import connections

from nrllm_agents.catalog import agents as catalog
from nrllm_agents.domain import Usage
from nrllm_agents.models import ACTIVE, AgentRun, AgentRunEvent, CancelSource, RunStatus
from nrllm_agents.store import runs as run_store
from nrllm_agents.store import trees as tree_store
from tests import waits
from tests.conftest import race_rounds
from tests.e2e.processes import wait_for
from tests.integration.executors.test_queue import journal, no_redis  # noqa: F401  (fixtures)
from tests.integration.runtime.test_races import race

pytestmark = pytest.mark.django_db(transaction=True)


def calls(name: str, n: int) -> dict:
    return {"tool_calls": [{"name": name, "arguments": {"prompt": f"part {i}"}} for i in range(n)]}


def agent(name: str, script: list, subs: tuple[str, ...] = (), description: str = "") -> None:
    definition = {"provider": "scripted", "script": script, "tools": [], "agents": list(subs)}
    catalog.save(name, definition, description=description or f"the {name}")


def tree(fan_out: int, leaf: list) -> None:
    """root -> `fan_out` mids -> `fan_out` leaves each (depth 3: 1 + n + n*n runs)."""
    agent("leaf", leaf)
    agent("mid", [calls("leaf", fan_out), {"content": "mid done"}], ("leaf",))
    agent("root", [calls("mid", fan_out), {"content": "root done"}], ("mid",))


def runs_of(root_id) -> list[AgentRun]:
    return [AgentRun.objects.get(pk=root_id), *AgentRun.objects.filter(tree_root_id=root_id)]


def test_a_tree_of_depth_3_completes_and_each_call_is_answered_by_its_child(runtime, no_redis):  # noqa: F811
    tree(2, [{"content": "leaf answer"}])
    root_id = runtime.enqueue({"agent": "root", "prompt": "plan"})
    assert waits.wait_local_idle(60)
    root = AgentRun.objects.get(pk=root_id)
    assert (root.status, root.final_text) == (RunStatus.COMPLETED, "root done")
    below = list(AgentRun.objects.filter(tree_root_id=root_id))
    assert sorted(r.tree_depth for r in below) == [1, 1, 2, 2, 2, 2]
    assert {r.status for r in below} == {RunStatus.COMPLETED}
    for child in below:
        assert child.tree_parent_id is not None and child.tree_call_id
        assert child.agent_snapshot["name"] == ("mid" if child.tree_depth == 1 else "leaf")
        assert child.owner_id == root.owner_id
        called = AgentRunEvent.objects.get(run_id=child.tree_parent_id, sequence=child.tree_call_sequence)
        assert called.kind == "llm" and child.tree_call_id in [c["id"] for c in called.payload["tool_calls"]]
    tools = AgentRunEvent.objects.filter(run_id=root_id, kind="tool")
    assert [t.payload["result"] for t in tools] == ["mid done", "mid done"]
    mids = AgentRunEvent.objects.filter(run__tree_depth=1, kind="tool")
    assert {t.payload["result"] for t in mids} == {"leaf answer"}


def test_a_cancel_of_the_root_stops_every_call_in_flight_of_the_tree(runtime, no_redis, journal):  # noqa: F811
    tree(2, [{"delay": 30, "content": "a slow answer " * 40}])
    root_id = runtime.enqueue({"agent": "root", "prompt": "plan"})
    leaves = AgentRun.objects.filter(tree_root_id=root_id, tree_depth=2, status=RunStatus.RUNNING)
    wait_for(
        lambda: leaves.count() == 4 and waits.models_called(journal, leaves.values_list("pk", flat=True)) == 4,
        timeout=60,
        what="four leaves streaming",
    )
    assert AgentRun.objects.get(pk=root_id).status == RunStatus.WAITING_FOR_CHILDREN  # holding no worker
    started = time.monotonic()
    result = runtime.cancel(root_id, source=CancelSource.API, reason="stop the tree")
    assert result.outcome == "cancelled"
    assert waits.wait_local_idle(60)
    assert time.monotonic() - started < 20  # generous: 30 s answers were cut short
    for run in runs_of(root_id):
        assert run.status == RunStatus.CANCELLED, run
        stream = list(AgentRunEvent.objects.filter(run=run).order_by("sequence"))
        assert stream[-1].kind == "cancelled" and [e.kind for e in stream].count("cancelled") == 1
        if run.pk != root_id:
            assert stream[-1].payload["inherited"] == {
                "run_id": str(root_id),
                "by": None,
                "source": "api",
                "reason": "stop the tree",
            }
        if run.tree_depth == 2:  # the leaf's call in flight was interrupted, and recorded
            assert stream[-2].kind == "llm" and stream[-2].payload.get("interrupted") is True
    # Nothing started after: no leaf made a second call, no parent answered its calls
    assert not AgentRunEvent.objects.filter(run__tree_root_id=root_id, kind="tool").exists()
    assert not AgentRunEvent.objects.filter(run_id=root_id, kind="tool").exists()
    again = runtime.cancel(root_id, source=CancelSource.API)
    assert again.outcome == "already_cancelled"


def test_a_fork_of_a_cancelled_tree_continues_from_the_root_s_stop(runtime, no_redis):  # noqa: F811
    tree(2, [{"delay": 30, "content": "never"}])
    root_id = runtime.enqueue({"agent": "root", "prompt": "plan"})
    leaves = AgentRunEvent.objects.filter(run__tree_root_id=root_id, run__tree_depth=2, kind="request")
    wait_for(lambda: leaves.count() == 4, timeout=60, what="four leaves streaming")
    runtime.cancel(root_id, source=CancelSource.API, reason="rethink")
    assert waits.wait_local_idle(60)
    boundary = AgentRunEvent.objects.filter(run_id=root_id, kind="cancelled").get().payload["boundary_sequence"]
    # the root's calls to its sub-agents are the last thing it did: the fork starts after them,
    # each call answered (the tree was cancelled), and its model goes on from there
    fork = runtime.fork(root_id, overrides={"script": [{"content": "carried on without them"}]})
    assert waits.wait_local_idle(60)
    forked = AgentRun.objects.get(pk=fork.run_id)
    assert (forked.status, forked.final_text) == (RunStatus.COMPLETED, "carried on without them")
    assert (forked.parent_id, forked.forked_from_sequence) == (root_id, boundary)
    first = AgentRunEvent.objects.filter(run=forked).order_by("sequence").first()
    assert first.kind == "forked"
    answered = [m for m in first.payload["messages"] if m.get("role") == "tool"]
    assert len(answered) == 2  # both calls to "mid", answered in the fork's transcript
    assert not AgentRun.objects.filter(tree_root_id=fork.run_id).exclude(pk=fork.run_id).exists()  # no child anew
    assert {r.status for r in runs_of(root_id)} == {RunStatus.CANCELLED}  # the parent tree is only read


def test_a_child_cancelled_on_its_own_is_a_tool_error_and_its_parent_completes(runtime, no_redis):  # noqa: F811
    agent("slow", [{"delay": 30, "content": "never"}])
    agent("boss", [calls("slow", 1), {"content": "went on"}], ("slow",))
    root_id = runtime.enqueue({"agent": "boss", "prompt": "delegate"})
    child = wait_for(
        lambda: AgentRun.objects.filter(tree_parent_id=root_id, status=RunStatus.RUNNING).first(),
        timeout=30,
        what="the child running",
    )
    wait_for(lambda: AgentRunEvent.objects.filter(run=child, kind="request").exists(), timeout=30, what="its call")
    runtime.cancel(child.pk, source=CancelSource.API, reason="not needed")
    assert waits.wait_local_idle(60)
    root = AgentRun.objects.get(pk=root_id)
    assert (root.status, root.final_text) == (RunStatus.COMPLETED, "went on")
    tool = AgentRunEvent.objects.get(run_id=root_id, kind="tool")
    assert (
        tool.payload["result"] is None
        and "cancelled" in tool.payload["error"]
        and "not needed" in tool.payload["error"]
    )
    assert "inherited" not in AgentRunEvent.objects.filter(run=child, kind="cancelled").get().payload


def test_a_definition_that_recurses_or_nests_too_deep_is_refused_when_saved(settings):
    settings.NRLLM_AGENTS = {"MAX_TREE_DEPTH": 2}
    agent("a", [{"content": "a"}])
    agent("b", [{"content": "b"}], ("a",))
    agent("c", [{"content": "c"}], ("b",))
    with pytest.raises(catalog.InvalidAgent, match="sub-agents 3 levels deep; at most 2"):  # d -> c -> b -> a
        agent("d", [{"content": "d"}], ("c",))
    settings.NRLLM_AGENTS = {"MAX_TREE_DEPTH": 1}
    with pytest.raises(catalog.InvalidAgent, match="sub-agents 3 levels deep; at most 1"):
        agent("e", [{"content": "e"}], ("c", "a"))
    with pytest.raises(catalog.InvalidAgent, match="calls itself"):
        agent("a", [{"content": "a"}], ("c",))


@pytest.mark.postgres_only
@pytest.mark.postgres
def test_two_saves_that_together_close_a_cycle_cannot_both_pass():
    """A calls B and B calls A: each save alone passes its check, so the checks of two saves at
    once must be serialized (the graph's lock) for the second to see the first and refuse."""
    rounds = race_rounds(30)
    for i in range(rounds):
        first, second = f"a{i}", f"b{i}"
        agent(first, [{"content": "a"}])
        agent(second, [{"content": "b"}])
        barrier = threading.Barrier(2)
        saved: dict[str, bool] = {}

        def save(name: str, sub: str) -> None:
            try:
                barrier.wait()
                agent(name, [{"content": name}], (sub,))
                saved[name] = True
            except catalog.InvalidAgent:
                saved[name] = False
            finally:
                connections.close_all()

        threads = [threading.Thread(target=save, args=pair) for pair in ((first, second), (second, first))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert sorted(saved.values()) == [False, True], f"round {i}: {saved}"


def test_a_sub_agent_on_the_scripted_provider_is_refused_in_production(runtime, no_redis, settings):  # noqa: F811
    """The scripted provider (a test double) is refused wherever a run is started for a user,
    a sub-agent's child run included: its call is answered with a tool error, no child starts."""
    agent("leaf", [{"content": "leaf answer"}])
    agent("boss", [calls("leaf", 1), {"content": "boss done"}], ("leaf",))
    settings.NRLLM_AGENTS = {**getattr(settings, "NRLLM_AGENTS", {}), "ALLOW_SCRIPTED": False}
    root_id = runtime.enqueue({"agent": "boss", "prompt": "plan"})  # an operator's run: not asked
    assert waits.wait_local_idle(60)
    root = AgentRun.objects.get(pk=root_id)
    assert (root.status, root.final_text) == (RunStatus.COMPLETED, "boss done")
    assert not AgentRun.objects.filter(tree_root_id=root_id).exists()
    tool = AgentRunEvent.objects.get(run_id=root_id, kind="tool").payload
    assert tool["result"] is None and "scripted provider is a test double" in tool["error"]


def _running(owner: str, **fields) -> AgentRun:
    return run_store.begin({"prompt": "p", "provider": "scripted", **fields}, claimed_by=owner)


def _spawn_racing_the_cancel(parent: AgentRun, root: AgentRun, children: list[tree_store.Child]) -> bool:
    """``parent`` spawns ``children`` at the moment ``root``'s tree is cancelled; whether the
    spawn committed first (the cancel always applies)."""
    spawned, cancelled = race(
        lambda: tree_store.spawn(
            parent.pk, parent.claimed_by, state={}, iterations=0, usage=Usage(), children=children
        ),
        lambda: tree_store.cancel_tree(root.pk, source=CancelSource.API, reason="race"),
    )
    assert not isinstance(spawned, BaseException), spawned
    assert cancelled.transition.applied, cancelled
    return bool(spawned.applied)


@pytest.mark.postgres_only
@pytest.mark.postgres
def test_a_cancel_of_the_root_racing_a_spawn_below_it_leaves_no_child_running():
    """The ancestor fence: a mid-level parent spawns children while the root is cancelled. Either
    the spawn committed first (its children are cancelled with the tree) or it finds itself
    cancelled and creates nothing. Never a child active under a cancelled root."""
    rounds = race_rounds(100)
    escaped, spawned_first = 0, 0
    for _ in range(rounds):
        root = _running("r")
        AgentRun.objects.filter(pk=root.pk).update(status=RunStatus.WAITING_FOR_CHILDREN, claimed_by="")
        mid = _running("m", tree_parent=root, tree_root=root, tree_depth=1, tree_call_id="c")
        children = [
            tree_store.Child(
                f"call_{i}",
                {"prompt": "leaf", "provider": "scripted", "tree_parent_id": mid.pk, "tree_root_id": root.pk},
                {"prompt": "leaf"},
            )
            for i in range(3)
        ]
        spawn_won = _spawn_racing_the_cancel(mid, root, children)
        spawned_first += spawn_won
        tree_runs = AgentRun.objects.filter(tree_root_id=root.pk)
        escaped += tree_runs.filter(status__in=[s.value for s in ACTIVE]).count()
        assert tree_runs.filter(tree_parent_id=mid.pk).count() == (3 if spawn_won else 0)
        mid.refresh_from_db()  # it was running: its segment writes its step; the row names the cancel
        assert mid.status == RunStatus.CANCELLED and mid.cancel_detail["inherited"]["run_id"] == str(root.pk)
        for run in tree_runs.filter(tree_parent_id=mid.pk):  # queued when cancelled: the step is written
            stream = AgentRunEvent.objects.filter(run=run, kind="cancelled")
            assert stream.count() == 1 and stream.get().payload["inherited"]["run_id"] == str(root.pk)
    assert escaped == 0
    print(f"{spawned_first} of {rounds} spawns committed before the cancel")  # both orders are legal


@pytest.mark.postgres_only
@pytest.mark.postgres
def test_a_cancel_of_a_root_racing_its_first_spawn_leaves_no_child_running():
    """A root with no children yet is cancelled by the one statement of a run of no tree (issue 44,
    item 18) while it spawns its first children: the statement's snapshot cannot see them, so it
    must leave the run to the tree's path, which cancels them. Never a child active under a
    cancelled root."""
    rounds = race_rounds(100)
    escaped, spawned_first = 0, 0
    for _ in range(rounds):
        root = _running("r")
        children = [
            tree_store.Child(f"call_{i}", {"prompt": "leaf", "provider": "scripted"}, {"prompt": "leaf"})
            for i in range(2)
        ]
        spawn_won = _spawn_racing_the_cancel(root, root, children)
        spawned_first += spawn_won
        below = AgentRun.objects.filter(tree_root_id=root.pk)
        assert below.count() == (2 if spawn_won else 0)
        escaped += below.filter(status__in=[s.value for s in ACTIVE]).count()
        assert AgentRun.objects.get(pk=root.pk).status == RunStatus.CANCELLED
    assert escaped == 0
    print(f"{spawned_first} of {rounds} spawns committed before the cancel")  # both orders are legal


@pytest.mark.postgres_only
@pytest.mark.postgres
def test_the_cancel_of_a_run_of_no_tree_is_one_statement(runtime):
    """A lone running run pays nothing for trees (issue 44, item 18): ``AgentRuntime.cancel`` sends
    one statement, no transaction around it, no tree read; a root's cancel still covers its tree."""
    from django.db import connection

    lone = _running("lone")
    sent: list[str] = []

    def count(execute, sql, params, many, context):
        sent.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(count):
        result = runtime.cancel(lone.pk, source=CancelSource.API, reason="alone")
    assert result.outcome == "cancelled" and result.previous_status == RunStatus.RUNNING
    assert len(sent) == 1, sent
    assert AgentRun.objects.get(pk=lone.pk).status == RunStatus.CANCELLED

    root = _running("r")
    AgentRun.objects.filter(pk=root.pk).update(status=RunStatus.WAITING_FOR_CHILDREN, claimed_by="")
    child = run_store.begin(
        {"prompt": "c", "provider": "scripted", "tree_parent": root, "tree_root": root, "tree_depth": 1},
        claimed_by="c",
    )
    result = runtime.cancel(root.pk, source=CancelSource.API, reason="tree")
    assert result.outcome == "cancelled"
    assert AgentRun.objects.get(pk=child.pk).cancel_detail["inherited"]["run_id"] == str(root.pk)


def test_a_spawn_after_the_cancel_committed_creates_nothing():
    root = _running("r")
    AgentRun.objects.filter(pk=root.pk).update(status=RunStatus.WAITING_FOR_CHILDREN, claimed_by="")
    mid = _running("m", tree_parent=root, tree_root=root, tree_depth=1, tree_call_id="c")
    tree_store.cancel_tree(root.pk, source=CancelSource.CLI, reason="first")
    child = tree_store.Child("x", {"prompt": "leaf", "provider": "scripted"}, {"prompt": "leaf"})
    fence = tree_store.spawn(mid.pk, "m", state={}, iterations=0, usage=Usage(), children=[child])
    assert (fence.applied, fence.status) == (False, RunStatus.CANCELLED)
    assert not AgentRun.objects.filter(tree_parent_id=mid.pk).exists()
    assert AgentRun.objects.get(pk=mid.pk).cancel_detail["inherited"]["run_id"] == str(root.pk)
    assert uuid.UUID(str(root.pk))


def test_a_parent_whose_wake_never_came_is_woken_by_the_reaper_s_pass(runtime, no_redis, monkeypatch):  # noqa: F811
    """The last child's process died between its end and the wake: the maintenance pass wakes it."""
    from nrllm_agents.runtime import trees as runtime_trees

    agent("quick", [{"content": "quick answer"}])
    agent("waiter", [calls("quick", 2), {"content": "woken"}], ("quick",))
    monkeypatch.setattr(runtime_trees, "wake", lambda parent, dispatch: None)  # the wake is lost
    root_id = runtime.enqueue({"agent": "waiter", "prompt": "go"})
    assert waits.wait_local_idle(60)
    assert AgentRun.objects.get(pk=root_id).status == RunStatus.WAITING_FOR_CHILDREN
    assert tree_store.stranded_parents() == [root_id]
    monkeypatch.undo()
    runtime.reap()
    assert waits.wait_local_idle(60)
    root = AgentRun.objects.get(pk=root_id)
    assert (root.status, root.final_text) == (RunStatus.COMPLETED, "woken")
    assert tree_store.stranded_parents() == []


def test_an_approval_pending_in_a_child_is_closed_by_the_cancel_of_the_root(runtime, no_redis):  # noqa: F811
    from nrllm_agents.runtime.agent_runtime import ApprovalNotPending

    note = {"tool_calls": [{"name": "write_note", "arguments": {"title": "t", "body": "b"}}]}
    definition = {"provider": "scripted", "script": [note, {"content": "noted"}], "tools": ["write_note"]}
    catalog.save("gated", definition, description="writes a note")
    agent("boss", [calls("gated", 1), {"content": "never"}], ("gated",))
    root_id = runtime.enqueue({"agent": "boss", "prompt": "note it"})
    child = wait_for(
        lambda: AgentRun.objects.filter(tree_parent_id=root_id, status=RunStatus.WAITING_FOR_APPROVAL).first(),
        timeout=30,
        what="the child waiting for approval",
    )
    runtime.cancel(root_id, source=CancelSource.ADMIN, reason="drop it")
    child.refresh_from_db()
    assert (child.status, child.suspended_state) == (RunStatus.CANCELLED, None)
    with pytest.raises(ApprovalNotPending):
        runtime.approve(child.pk, True)
    last = AgentRunEvent.objects.filter(run=child).order_by("-sequence").first()
    assert last.kind == "cancelled" and last.payload["inherited"]["source"] == "admin"
    assert waits.wait_local_idle(30)


def test_a_bulk_cancel_of_a_root_cancels_its_whole_tree(runtime, no_redis):  # noqa: F811
    """The admin's and the API's bulk cancel: the selected root's tree goes with it."""
    tree(2, [{"delay": 30, "content": "slow"}])
    root_id = runtime.enqueue({"agent": "root", "prompt": "plan"})
    wait_for(
        lambda: AgentRunEvent.objects.filter(run__tree_root_id=root_id, run__tree_depth=2, kind="request").count() == 4,
        timeout=60,
        what="four leaves streaming",
    )
    result = runtime.cancel_many(AgentRun.objects.filter(pk=root_id), source=CancelSource.ADMIN, reason="bulk")
    assert (result.cancelled_total, result.cascaded) == (1, 6)
    assert waits.wait_local_idle(60)
    for run in runs_of(root_id):
        assert run.status == RunStatus.CANCELLED
        last = AgentRunEvent.objects.filter(run=run).order_by("-sequence").first()
        assert last.kind == "cancelled"
        if run.pk != root_id:
            assert last.payload["inherited"] == {
                "run_id": str(root_id),
                "by": None,
                "source": "admin",
                "reason": "bulk",
            }
    assert not AgentRunEvent.objects.filter(run__tree_root_id=root_id, kind="tool").exists()


def test_calls_past_the_depth_or_fan_out_limit_at_run_time_start_nothing_and_answer_a_tool_error(
    runtime,
    no_redis,
    settings,  # noqa: F811
):
    """Saved under the defaults, run under tighter limits: the refusal at run time (``Family.
    refusal``) answers each call past a limit with a tool error; the calls within start children."""
    tree(3, [{"content": "leaf answer"}])  # root -> 3 mids -> 3 leaves each
    settings.NRLLM_AGENTS = {**getattr(settings, "NRLLM_AGENTS", {}), "MAX_TREE_DEPTH": 1, "MAX_FAN_OUT": 2}
    root_id = runtime.enqueue({"agent": "root", "prompt": "plan"})
    assert waits.wait_local_idle(60)
    root = AgentRun.objects.get(pk=root_id)
    assert (root.status, root.final_text) == (RunStatus.COMPLETED, "root done")
    mids = list(AgentRun.objects.filter(tree_root_id=root_id))
    assert len(mids) == 2 and {m.tree_depth for m in mids} == {1}  # two of three; no leaf at depth 2
    assert {m.status for m in mids} == {RunStatus.COMPLETED}
    answers = [e.payload for e in AgentRunEvent.objects.filter(run_id=root_id, kind="tool").order_by("sequence")]
    assert [a["result"] for a in answers] == ["mid done", "mid done", None]
    assert "at most 2 sub-agent calls in one turn" in answers[2]["error"]
    for mid in mids:
        refused = [e.payload for e in AgentRunEvent.objects.filter(run=mid, kind="tool")]
        assert len(refused) == 3  # every call: the depth is looked at first
        assert all("nested deeper than 1 levels" in r["error"] for r in refused)
