"""A worker's shutdown never waits forever for RQ's scheduler process (the test Redis; real
forked processes, no database).

Guards: after a Redis restart RQ forks its scheduler again from its registry maintenance, and
its own ``stop_scheduler`` joins that process without a bound. A scheduler that hung (e.g. forked
while the maintenance thread held a lock) held the worker's warm shutdown, and so the restart
of ``scripts/worker.sh``, forever.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time
from multiprocessing.context import ForkProcess
from typing import Any

import pytest
import redis
from rq.scheduler import RQScheduler
from rq.worker import BaseWorker

from nrllm_agents.workers import outages
from nrllm_agents.workers.maintenance import Maintainer
from nrllm_agents.workers.rq_worker import GracefulWorker
from nrllm_agents.workers.threaded import ThreadedWorker

pytestmark = pytest.mark.processes  # the scheduler under test is a forked process


def _stubborn(ready: Any) -> None:
    """A scheduler that ignores SIGTERM and never ends by itself."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    ready.set()
    while True:
        time.sleep(1)


def _obedient(ready: Any) -> None:
    ready.set()
    while True:
        time.sleep(1)


@pytest.fixture(params=["rqworker", "agent_worker"])
def worker(request, redis_url, monkeypatch):
    monkeypatch.setattr("sys.setswitchinterval", lambda interval: None)  # leave this process's GIL alone
    connection = redis.Redis.from_url(redis_url)
    if request.param == "rqworker":
        made = GracefulWorker(["default"], connection=connection)
    else:
        made = ThreadedWorker(["default"], connection=connection, concurrency=1)
    made.scheduler = RQScheduler(["default"], connection=connection)
    return made


@pytest.mark.parametrize("target", [_stubborn, _obedient])
def test_stopping_the_scheduler_is_bounded(worker, target, monkeypatch):
    monkeypatch.setattr(outages, "SCHEDULER_STOP_SECONDS", 1.0)
    ready = multiprocessing.get_context("fork").Event()
    process = ForkProcess(target=target, args=(ready,), name="Scheduler")
    process.start()
    assert ready.wait(30)
    worker.scheduler._process = process
    started = time.monotonic()
    try:
        worker.stop_scheduler()
        assert not process.is_alive()
        assert time.monotonic() - started < 10
        # SIGTERM is enough for one that obeys; SIGKILL ends one that does not.
        assert process.exitcode == (-signal.SIGKILL if target is _stubborn else -signal.SIGTERM)
    finally:
        if process.is_alive():
            os.kill(process.pid, signal.SIGKILL)
            process.join()


def test_rq_maintenance_waits_for_the_maintenance_thread_to_be_between_passes(worker, monkeypatch):
    """RQ may fork the scheduler inside ``run_maintenance_tasks``: not while a pass holds locks."""
    entered = threading.Event()
    monkeypatch.setattr(BaseWorker, "run_maintenance_tasks", lambda self: entered.set())  # RQ's own
    worker.maintainer = Maintainer(worker.name, 60)  # not started: the test holds its guard itself
    worker.maintainer.fork_guard.acquire()
    thread = threading.Thread(target=worker.run_maintenance_tasks, daemon=True)
    thread.start()
    try:
        assert not entered.wait(0.5)  # held back while the "pass" holds the guard
    finally:
        worker.maintainer.fork_guard.release()
    assert entered.wait(10)
    thread.join(10)
