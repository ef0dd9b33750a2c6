"""Acceptance: cancel through the REST API while a real RQ worker executes the run.

A queued run is created with ``POST /api/runs/`` (its job goes to real Redis), one real
``manage.py rqworker`` process claims and executes it, and ``POST /api/runs/{id}/cancel/``
answers 202. The worker stops within one step: the step in flight is recorded, then a
``cancelled`` step, and ``GET /api/runs/{id}/`` shows ``cancel.stopped_at`` afterwards.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from tests.conftest import manage
from tests.waits import wait_for

# Thirty rounds of "sleep 0.3 s": long enough that only a cancel ends it early.
ROUNDS = 30
SCRIPT = [{"tool_calls": [{"name": "sleep", "arguments": {"seconds": 0.3}}]} for _ in range(ROUNDS)]
SCRIPT.append({"content": "done"})


@pytest.fixture
def worker(child_env, redis_url):
    """One real rqworker on the test database and test Redis; always ended in teardown."""
    proc = manage("rqworker", "default", env={**child_env, "REDIS_URL": redis_url}, start_new_session=True)
    yield proc
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)  # its own process group: the worker and its work horse
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    proc.communicate()


# transaction=True: the worker is another process; it only sees committed rows.
@pytest.mark.django_db(transaction=True)
def test_cancel_through_the_api_stops_a_worker_executing_the_run_within_one_step(
    settings, redis_url, child_env, worker, django_user_model
):
    settings.REDIS_URL = redis_url
    settings.RQ_QUEUES = {"default": {"URL": redis_url}}
    alice = django_user_model.objects.create_user(username="alice")
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=alice).key}")

    created = api.post(
        "/api/runs/",
        {"prompt": "wait a lot", "tools": ["sleep"], "script": SCRIPT, "max_iterations": ROUNDS + 5},
        format="json",
    )
    assert created.status_code == 202, created.json()
    run_url = f"/api/runs/{created.json()['run_id']}/"

    def executing_with_steps() -> bool:
        page = api.get(run_url + "events/").json()
        return page["status"] == "running" and any(e["kind"] == "tool" for e in page["results"])

    wait_for(executing_with_steps, what="the worker to execute the run and record a tool step")
    cancel = api.post(run_url + "cancel/", {"reason": "enough"}, format="json")
    cancelled_by = time.time()  # the cancel is committed by now
    assert cancel.status_code == 202, cancel.json()
    assert (cancel.json()["outcome"], cancel.json()["previous_status"], cancel.json()["stopping"]) == (
        "cancelled",
        "running",
        True,
    )

    def stopped() -> dict[str, Any] | None:
        body = api.get(run_url).json()
        return body if body["cancel"] and body["cancel"]["stopped_at"] else None

    run = wait_for(stopped, what="the worker to acknowledge the cancel (cancel.stopped_at)")
    assert (run["status"], run["termination_reason"]) == ("cancelled", "cancelled")
    assert (run["cancel"]["source"], run["cancel"]["by"], run["cancel"]["reason"]) == ("api", "alice", "enough")
    assert run["final_text"] is None

    # The stream ends with the step that was in flight, then the acknowledgement.
    page = api.get(run_url + "events/", {"limit": 1000}).json()
    events = page["results"]
    assert page["finished"] is True and not page["has_more"]
    assert [e["sequence"] for e in events] == list(range(len(events)))
    in_flight, last = events[-2], events[-1]
    assert last["kind"] == "cancelled"
    assert last["payload"]["boundary_sequence"] == in_flight["sequence"]
    assert (last["payload"]["source"], last["payload"]["by"]) == ("api", "alice")
    assert in_flight["kind"] in ("request", "llm", "tool")

    # Nothing after the boundary started: at most the one step that began before the probe
    # that saw the cancel (model calls and tool starts are journalled by the worker).
    journal = [json.loads(line) for line in Path(child_env["NRLLM_CALL_JOURNAL"]).read_text().splitlines()]
    assert {entry["pid"] for entry in journal} != {os.getpid()}, "the worker process did the work"
    started_after = [entry for entry in journal if entry["t"] > cancelled_by]
    assert len(started_after) <= 1, started_after
    assert sum(1 for entry in journal if entry["what"] == "tool") < ROUNDS
