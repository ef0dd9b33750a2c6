"""Trees of runs executed by real ``agent_worker`` processes on PostgreSQL (issue 36).

``transaction=True``: the workers read and write the test database over their own connections.
"""

from __future__ import annotations

import time

import pytest

from nrllm_agents.models import AgentRun, AgentRunEvent, CancelSource, RunStatus
from tests import waits
from tests.e2e.processes import FROZEN, Workers, wait_for
from tests.integration.runtime.test_trees import agent, calls, runs_of, tree

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres_only, pytest.mark.processes]


def test_a_parent_waiting_for_its_children_holds_no_worker(runtime, queue, worker_env, tmp_path):
    """One slot: the parent must give it up for its 3 children to run, then comes back."""
    agent("helper", [{"delay": 0.2, "content": "helped"}])
    agent("lead", [calls("helper", 3), {"content": "all helped"}], ("helper",))
    with Workers(worker_env, count=1, log_dir=tmp_path, command="agent_worker", extra_args=("--concurrency", "1")):
        root_id = runtime.enqueue({"agent": "lead", "prompt": "go"})
        wait_for(lambda: AgentRun.objects.get(pk=root_id).status == RunStatus.COMPLETED, timeout=90, what="the tree")
    root = AgentRun.objects.get(pk=root_id)
    assert root.final_text == "all helped"
    children = AgentRun.objects.filter(tree_parent_id=root_id)
    assert [c.status for c in children] == [RunStatus.COMPLETED] * 3
    processes = {c.claimed_by.split(":")[2] for c in [*children, root]}
    assert len(processes) == 1  # one worker process with one slot ran the whole tree
    assert [e.payload["result"] for e in AgentRunEvent.objects.filter(run_id=root_id, kind="tool")] == ["helped"] * 3


def test_a_cancel_of_the_root_interrupts_every_leaf_of_a_tree_run_by_workers(runtime, queue, worker_env, tmp_path):
    """1 + 3 + 9 runs, the 9 leaves streaming a 30 s answer on two worker processes: one cancel
    of the root ends every call in flight (a generous bound), and nothing starts after."""
    tree(3, [{"delay": 30, "content": "a slow answer " * 40}])
    workers = Workers(worker_env, count=2, log_dir=tmp_path, command="agent_worker", extra_args=("--concurrency", "8"))
    with workers:
        root_id = runtime.enqueue({"agent": "root", "prompt": "plan"})
        leaves = AgentRun.objects.filter(tree_root_id=root_id, tree_depth=2)
        wait_for(
            lambda: waits.models_called(worker_env["NRLLM_CALL_JOURNAL"], leaves.values_list("pk", flat=True)) == 9,
            timeout=90,
            what="nine leaves streaming",
        )
        started = time.monotonic()
        assert runtime.cancel(root_id, source=CancelSource.API, reason="enough").outcome == "cancelled"
        wait_for(
            lambda: not AgentRun.objects.filter(tree_root_id=root_id, stopped_at__isnull=True).exists(),
            timeout=30,
            what="every run of the tree stopped",
        )
        assert time.monotonic() - started < 15  # generous: the answers take 30 s
    for run in runs_of(root_id):
        assert run.status == RunStatus.CANCELLED
        kinds = list(AgentRunEvent.objects.filter(run=run).order_by("sequence").values_list("kind", flat=True))
        assert kinds[-1] == "cancelled" and kinds.count("cancelled") == 1
        last = AgentRunEvent.objects.filter(run=run).order_by("-sequence").first()
        if run.pk != root_id:
            assert last.payload["inherited"]["run_id"] == str(root_id)
        if run.tree_depth == 2:
            assert kinds == ["request", "llm", "cancelled"]
            llm = AgentRunEvent.objects.get(run=run, kind="llm")
            assert llm.payload["interrupted"] is True
    assert not AgentRunEvent.objects.filter(run__tree_root_id=root_id, kind="tool").exists()
    for name in workers.names:  # no full collection paused a leaf's stop (workers/heap.py)
        assert FROZEN.search(workers.log_text(name)), workers.log(name)


def test_a_worker_sigkilled_mid_tree_loses_nothing_and_the_tree_completes(runtime, queue, worker_env, tmp_path):
    """SIGKILL of the worker while 3 children stream: the parent keeps waiting (it holds no
    worker), the reaper requeues the children once their leases lapse, a second worker completes
    them, and their end wakes the parent: every stream gap-free, no step lost or repeated."""
    from django.utils import timezone

    env = {**worker_env, "NRLLM_LEASE_SECONDS": "3"}
    agent("helper", [{"delay": 4, "content": "helped"}])
    agent("lead", [calls("helper", 3), {"content": "all helped"}], ("helper",))
    victim = Workers(env, count=1, log_dir=tmp_path / "a", command="agent_worker", extra_args=("--concurrency", "4"))
    victim.start()
    try:
        root_id = runtime.enqueue({"agent": "lead", "prompt": "go"})
        children = AgentRun.objects.filter(tree_parent_id=root_id)
        wait_for(
            lambda: AgentRunEvent.objects.filter(run__tree_parent_id=root_id, kind="request").count() == 3,
            timeout=60,
            what="three children streaming",
        )
        victim.kill(0)
    finally:
        victim.stop()
    assert AgentRun.objects.get(pk=root_id).status == RunStatus.WAITING_FOR_CHILDREN
    assert children.filter(status=RunStatus.RUNNING).count() == 3  # nobody settles for the dead
    wait_for(
        lambda: not children.filter(status=RunStatus.RUNNING, lease_expires__gt=timezone.now()).exists(),
        timeout=30,
        what="the leases to lapse",
    )
    assert len(runtime.reap().requeued) == 3
    with Workers(env, count=1, log_dir=tmp_path / "b", command="agent_worker", extra_args=("--concurrency", "4")):
        wait_for(lambda: AgentRun.objects.get(pk=root_id).status == RunStatus.COMPLETED, timeout=90, what="the tree")
    assert AgentRun.objects.get(pk=root_id).final_text == "all helped"
    for run in runs_of(root_id):
        sequences = list(AgentRunEvent.objects.filter(run=run).order_by("sequence").values_list("sequence", flat=True))
        assert sequences == list(range(len(sequences)))
    for child in children:
        assert child.status == RunStatus.COMPLETED and child.attempts == 1
        kinds = list(AgentRunEvent.objects.filter(run=child).order_by("sequence").values_list("kind", flat=True))
        assert kinds == ["request", "request", "llm"]  # killed inside its model call: asked again once
    root_kinds = list(AgentRunEvent.objects.filter(run_id=root_id).order_by("sequence").values_list("kind", flat=True))
    assert root_kinds == ["request", "llm", "tool", "tool", "tool", "request", "llm"]


def test_a_tree_on_forking_rqworkers_completes_and_one_cancel_stops_it(runtime, queue, worker_env, tmp_path):
    """The forking worker (a work horse per run) executes trees too: a lead's two children run
    at once on two workers while the lead holds none and completes from their answers; then a
    cancel of another lead interrupts both its children's calls in flight."""
    agent("helper", [{"delay": 0.5, "content": "helped"}])
    agent("lead", [calls("helper", 2), {"content": "both helped"}], ("helper",))
    agent("slow_helper", [{"delay": 30, "content": "a slow answer " * 40}])
    agent("slow_lead", [calls("slow_helper", 2), {"content": "never"}], ("slow_helper",))
    with Workers(worker_env, count=2, log_dir=tmp_path, command="rqworker"):
        done_id = runtime.enqueue({"agent": "lead", "prompt": "go"})
        wait_for(lambda: AgentRun.objects.get(pk=done_id).status == RunStatus.COMPLETED, timeout=90, what="the lead")
        assert AgentRun.objects.get(pk=done_id).final_text == "both helped"
        tools = AgentRunEvent.objects.filter(run_id=done_id, kind="tool").order_by("sequence")
        assert [e.payload["result"] for e in tools] == ["helped", "helped"]

        root_id = runtime.enqueue({"agent": "slow_lead", "prompt": "go"})
        streaming = AgentRunEvent.objects.filter(run__tree_parent_id=root_id, kind="request")
        wait_for(lambda: streaming.count() == 2, timeout=60, what="both children streaming")
        started = time.monotonic()
        assert runtime.cancel(root_id, source=CancelSource.API, reason="enough").outcome == "cancelled"
        wait_for(
            lambda: not AgentRun.objects.filter(tree_root_id=root_id, stopped_at__isnull=True).exists(),
            timeout=30,
            what="the tree stopped",
        )
        assert time.monotonic() - started < 15  # generous: the answers take 30 s
    for child in AgentRun.objects.filter(tree_parent_id=root_id):
        kinds = list(AgentRunEvent.objects.filter(run=child).order_by("sequence").values_list("kind", flat=True))
        assert child.status == RunStatus.CANCELLED and kinds == ["request", "llm", "cancelled"]
        assert AgentRunEvent.objects.get(run=child, kind="llm").payload["interrupted"] is True
