"""The threaded worker keeps RQ's own record of its state (the test Redis; no database)."""

from __future__ import annotations

import sys

import redis
from rq.worker import WorkerStatus

from nrllm_agents.workers.threaded import ThreadedWorker


def test_a_new_threaded_worker_reports_the_state_rq_gave_it(monkeypatch, redis_url):
    # Its own cache of the last state told to Redis once shadowed RQ's ``_state``: a worker
    # reported no state at all (None) until its first dequeue.
    monkeypatch.setattr(sys, "setswitchinterval", lambda interval: None)  # leave this process's GIL alone
    connection = redis.Redis.from_url(redis_url)
    worker = ThreadedWorker(["default"], connection=connection, concurrency=1)
    assert worker.get_state() == "starting"  # what RQ sets before bootstrap
    worker.set_state(WorkerStatus.IDLE, pipeline=connection.pipeline())  # queued, never sent
    assert worker.get_state() == WorkerStatus.IDLE
