"""Many runs in one process: hand-back on shutdown, connections given back between boundaries,
and the in-process executor holding many runs at once. Real database, real threads.

``transaction=True`` throughout: segments run on threads with connections of their own, which
only see committed rows.
"""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connections, transaction

from nrllm_agents.executors import dispatch
from nrllm_agents.models import AgentRun, AgentRunEvent, RunStatus
from nrllm_agents.runtime import segment
from nrllm_agents.runtime.agent_runtime import Outcome
from nrllm_agents.store.db import release_connection
from tests import waits
from tests.e2e.processes import wait_for
from tests.integration.executors.test_queue import no_redis, rq_queue  # noqa: F401  (fixtures)

pytestmark = pytest.mark.django_db(transaction=True)

LONG = {
    "prompt": "long",
    "tools": ["sleep"],
    "script": [{"delay": 30, "tool_calls": [{"name": "sleep", "arguments": {"seconds": 30}}]}, {"content": "ok"}],
}


@pytest.fixture
def shutdown():
    """``segment.hand_back_all`` sets a process-wide flag: clear it after the test."""
    yield segment.hand_back_all
    segment.shutdown_requested.clear()


def test_a_shutdown_ends_a_30_s_model_call_at_once_and_hands_the_run_back(runtime, rq_queue, shutdown):
    run_id = runtime.enqueue(LONG)
    rq_queue.empty()  # no worker here: this test is the worker
    results = []
    thread = threading.Thread(target=lambda: (results.append(runtime.run_queued(run_id)), connections.close_all()))
    thread.start()
    wait_for(
        lambda: AgentRunEvent.objects.filter(run_id=run_id, kind="request").exists(),
        timeout=10,
        what="the model call to start",
    )
    started = time.monotonic()
    assert shutdown() == 1  # one step cut short
    thread.join(10)
    assert not thread.is_alive() and time.monotonic() - started < 5
    assert results[0].outcome == Outcome.REQUEUED
    run = AgentRun.objects.get(pk=run_id)
    assert (run.status, run.attempts, run.claimed_by) == (RunStatus.QUEUED, 0, "")
    # The cut-short call is not recorded (the next worker repeats it), and nothing says "cancelled".
    assert list(AgentRunEvent.objects.filter(run_id=run_id).values_list("kind", flat=True)) == ["request"]
    assert dispatch.job_id(run_id, 1) in rq_queue.job_ids  # handed back: a job for the next worker


def test_a_segment_that_starts_after_the_shutdown_hands_back_before_its_first_call(runtime, rq_queue, shutdown):
    run_id = runtime.enqueue(LONG)
    shutdown()
    started = time.monotonic()
    result = runtime.run_queued(run_id)
    assert result.outcome == Outcome.REQUEUED and time.monotonic() - started < 5
    assert not AgentRunEvent.objects.filter(run_id=run_id).exists()
    assert AgentRun.objects.get(pk=run_id).status == RunStatus.QUEUED


def test_a_cancel_during_the_hand_back_is_acknowledged_as_a_cancel(runtime, rq_queue, shutdown):
    run_id = runtime.enqueue(LONG)
    shutdown()
    runtime.cancel(run_id, source="system", reason="meanwhile")
    assert runtime.run_queued(run_id) is None  # the claim loses: cancelled while queued
    assert AgentRun.objects.get(pk=run_id).status == RunStatus.CANCELLED


def test_release_connection_gives_the_thread_s_connection_back_outside_transactions():
    connection = connections["default"]
    AgentRun.objects.exists()
    assert connection.connection is not None
    release_connection()
    vendor_releases = connection.vendor == "sqlite" or bool(connection.settings_dict["OPTIONS"].get("pool"))
    assert (connection.connection is None) == vendor_releases
    AgentRun.objects.exists()  # and the next query takes one again
    assert connection.connection is not None


def test_the_in_process_executor_holds_many_runs_at_once(runtime, no_redis, settings):
    """60 runs of a 5 s model call, queued without Redis, all execute at once in this process."""
    request = {"prompt": "many", "tools": ["sleep"], "script": [{"delay": 5, "content": "ok"}]}
    with transaction.atomic():  # dispatched together, at the commit
        ids = [runtime.enqueue(request) for _ in range(60)]
    peak = wait_for(
        lambda: (n := AgentRun.objects.filter(pk__in=ids, status=RunStatus.RUNNING).count()) >= 50 and n,
        timeout=30,
        interval=0.02,
        what="the runs to execute at once",
    )
    assert peak >= 50
    assert waits.wait_local_idle(60)
    assert set(AgentRun.objects.filter(pk__in=ids).values_list("status", flat=True)) == {RunStatus.COMPLETED}


def test_a_segment_gives_its_connection_back_before_each_call_that_may_wait_and_only_then(runtime, monkeypatch):
    """Before every model call and every tool that may wait (``sleep``); not before the request
    step (no call starts there) nor an instant tool (the calculator, the clock), where giving the
    connection back and taking one again would cost more than the call. A scripted model with
    a delay waits (on its clock); one with none is instant too, and keeps it as well."""
    released: list[str] = []
    real = segment.release_connection
    monkeypatch.setattr(segment, "release_connection", lambda: (released.append("release"), real())[1])
    calls = [("calculator", {"expression": "2 + 2"}), ("current_time", {}), ("sleep", {"seconds": 0})]
    tools = ["calculator", "current_time", "sleep"]
    script = [{"tool_calls": [{"name": n, "arguments": a}], "delay": 0.001} for n, a in calls] + [{"content": "done"}]
    result = runtime.run({"prompt": "p", "tools": tools, "script": script})
    assert result.outcome == "completed"
    assert len(released) == len(script) + 1  # four model calls and the sleep

    released.clear()
    instant = [{k: v for k, v in turn.items() if k != "delay"} for turn in script]
    result = runtime.run({"prompt": "p", "tools": tools, "script": instant})
    assert result.outcome == "completed"
    assert released == ["release"]  # the sleep alone
