"""Limits and forks with real ``rqworker`` processes and the ``agent_reap`` command.

``transaction=True`` for every test: workers and commands are other processes on the test
database, so every row must be committed.
"""

from __future__ import annotations

import pytest
from django.utils import timezone

from nrllm_agents.executors import dispatch
from nrllm_agents.models import AgentRun, CancelSource, RunStatus
from tests.conftest import manage
from tests.e2e.processes import wait_for
from tests.e2e.workers.test_rqworker import (  # noqa: F401
    assert_starts_match_steps,
    events,
    finished,
    journal,
    results_of,
    start_workers,
)

pytestmark = pytest.mark.django_db(transaction=True)

CALC = {"name": "calculator", "arguments": {"expression": "1+1"}}
LONG = [{"delay": 0.4, "tool_calls": [CALC]} for _ in range(9)] + [{"content": "done"}]


def test_a_queued_run_overdue_before_any_worker_is_cancelled_by_the_reaper_and_never_executes(
    runtime, queue, start_workers, worker_env
):
    run_id = runtime.enqueue({"prompt": "p", "tools": ["calculator"], "script": LONG, "deadline_seconds": 1})
    job_id = dispatch.job_id(run_id)
    assert queue.job_ids == [job_id]  # waits in Redis: no worker yet
    run = AgentRun.objects.get(pk=run_id)
    wait_for(lambda: timezone.now() > run.deadline_at, what="the deadline to pass")

    reaper = manage("agent_reap", env=worker_env)
    out, err = reaper.communicate(timeout=120)
    assert reaper.returncode == 0, err
    assert "1 cancelled (deadline_exceeded)" in out

    start_workers(1)  # the job is delivered after the sweep
    assert wait_for(lambda: results_of(queue, job_id), what="the job to be executed") == [None]
    run.refresh_from_db()
    assert (run.status, run.termination_reason, run.cancel_source) == ("cancelled", "deadline_exceeded", "system")
    assert run.started_at is None and [e.kind for e in events(run_id)] == ["cancelled"]
    assert events(run_id)[0].payload["limit"]["limit"] == "deadline_seconds"
    assert journal(worker_env, run_id) == []


def test_a_deadline_stops_a_queued_run_on_a_worker_within_one_step(runtime, queue, start_workers, worker_env):
    start_workers(1)
    run_id = runtime.enqueue({"prompt": "p", "tools": ["calculator"], "script": LONG, "deadline_seconds": 2})
    wait_for(lambda: finished(run_id), what="the run to stop")
    run = AgentRun.objects.get(pk=run_id)
    assert (run.status, run.termination_reason, run.cancel_source) == ("cancelled", "deadline_exceeded", "system")
    steps = events(run_id)
    ack = steps[-1]
    assert ack.kind == "cancelled" and ack.payload["limit"]["value"] == 2
    boundary = steps[ack.payload["boundary_sequence"]]
    # The step before the boundary was recorded before the deadline (the run went on), and the
    # boundary's check found it passed. The boundary step itself is stamped as its write begins,
    # so under load it may carry a time a few milliseconds before the deadline its check saw.
    assert run.deadline_at >= steps[boundary.sequence - 1].created_at, (run.deadline_at, boundary.sequence)
    assert_starts_match_steps(worker_env, run_id)  # nothing started after the boundary


def test_a_fork_of_a_cancelled_run_completes_on_a_worker(runtime, queue, start_workers, worker_env):
    def observe(step):
        if step["kind"] == "llm":
            runtime.cancel(step["run_id"], source=CancelSource.CLI)

    script = [{"tool_calls": [CALC, CALC]}, {"content": "done"}]
    parent = runtime.run({"prompt": "p", "tools": ["calculator"], "script": script}, on_step=observe).run_id
    start_workers(1)
    fork = runtime.fork(parent)
    wait_for(lambda: finished(fork.run_id), what="the fork to finish")
    run = AgentRun.objects.get(pk=fork.run_id)
    assert (run.status, run.final_text, run.parent_id) == (RunStatus.COMPLETED, "done", parent)
    assert [e.kind for e in events(run.pk)] == ["forked", "request", "llm"]
    assert events(run.pk)[1].payload["message_count"] == 4  # prompt, turn, two repaired answers
