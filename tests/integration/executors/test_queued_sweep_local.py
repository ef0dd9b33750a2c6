"""Issue 9 finding 5 on the embedded default (no Redis): queued runs left behind by a process
that died (its in-process executor died with it) are recovered by ``agent_reap`` and, without
anyone running it, by the web process's own sweeper.

Guards: such runs stayed ``queued`` forever; ``agent_reap`` and ``make run`` did nothing.
``transaction=True``: the executor's threads use their own connections.
"""

from __future__ import annotations

import io
import threading
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.test import Client
from django.utils import timezone

from nrllm_agents import executors, store
from nrllm_agents.executors import recovery
from nrllm_agents.models import AgentRun, RunStatus
from nrllm_agents.validation.run_request import RunRequest
from tests import waits
from tests.e2e.processes import wait_for

pytestmark = pytest.mark.django_db(transaction=True)

SCRIPT = [{"tool_calls": [{"name": "calculator", "arguments": {"expression": "1 + 1"}}]}, {"content": "2"}]


@pytest.fixture(autouse=True)
def embedded(settings):
    settings.REDIS_URL = None
    settings.NRLLM_AGENTS = {**settings.NRLLM_AGENTS, "QUEUED_STALE_SECONDS": 0}
    yield
    waits.stop_local_maintenance()
    assert waits.wait_local_idle(30), "the in-process executor is still busy"


def stranded() -> AgentRun:
    """A queued run whose executor task is gone (stored, never dispatched)."""
    req = RunRequest.from_mapping({"prompt": "stranded", "tools": ["calculator"], "script": SCRIPT})
    return store.create_queued(req.row_fields(), req.as_dict())


def status(run: AgentRun) -> str:
    return AgentRun.objects.get(pk=run.pk).status


def test_agent_reap_recovers_queued_runs_with_no_executor_task():
    runs = [stranded() for _ in range(3)]
    out = io.StringIO()
    call_command("agent_reap", stdout=out)
    assert "queued runs: 3 recovered (no job), 0 still waiting for a worker" in out.getvalue()
    assert [status(r) for r in runs] == [RunStatus.COMPLETED] * 3


def test_the_web_process_sweeps_by_itself(settings):
    settings.NRLLM_AGENTS = {**settings.NRLLM_AGENTS, "QUEUED_SWEEP_SECONDS": 0.2}
    run = stranded()
    Client().get("/accounts/login/")  # any request starts the sweeper of a make-run process
    wait_for(lambda: status(run) == RunStatus.COMPLETED, timeout=30, what="the sweeper to recover the run")


def test_the_web_process_also_reaps_a_run_left_running_by_a_process_that_died(settings):
    """``make run`` killed mid-run: the next process's own maintenance requeues the run once its
    lease lapsed, and its executor finishes it (nothing scheduled, no agent_reap)."""
    settings.NRLLM_AGENTS = {**settings.NRLLM_AGENTS, "QUEUED_SWEEP_SECONDS": 0.2}
    req = RunRequest.from_mapping({"prompt": "orphaned", "tools": ["calculator"], "script": SCRIPT})
    lapsed = timezone.now() - timedelta(seconds=1)
    run = store.begin(req.row_fields(), claimed_by="interactive:gone:1:dead", lease_expires=lapsed)
    Client().get("/accounts/login/")
    wait_for(lambda: status(run) == RunStatus.COMPLETED, timeout=30, what="the maintenance to reap and finish it")
    assert AgentRun.objects.get(pk=run.pk).attempts == 1


def test_a_run_in_flight_in_this_process_is_only_waiting(monkeypatch):
    run = stranded()
    started, release = threading.Event(), threading.Event()

    def held(run_id: str) -> None:  # a task that has the run and has not claimed it yet
        started.set()
        release.wait(30)

    monkeypatch.setattr(executors.LOCAL, "job", held)
    executors.LOCAL.submit(str(run.pk), job_id="held")
    try:
        assert started.wait(30)
        report = recovery.sweep_queued()
        assert (report.recovered, report.waiting) == ([], 1)
    finally:
        release.set()
    assert waits.wait_local_idle(30)
    assert status(run) == RunStatus.QUEUED
    assert not executors.LOCAL.holds(str(run.pk), job_id="held", stale_after=0)
