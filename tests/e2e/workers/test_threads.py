"""Threads over HTTP with real rqworker processes (PostgreSQL and SQLite): the scenarios of
``tests/integration/api/test_threads.py``, each run executed by a worker process, each stop
dispatching the thread's next message from that worker.

``transaction=True``: the workers are other processes; they see only committed rows.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.processes import Workers
from tests.integration.api.test_threads import (
    client_of,
    scenario_enqueue,
    scenario_interrupt,
    scenario_reject,
    scenario_rollback,
)

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def workers(queue, worker_env, tmp_path):
    with Workers(worker_env, count=2, log_dir=tmp_path / "worker-logs") as started:
        yield started


@pytest.fixture
def api(django_user_model, workers):
    return client_of(django_user_model.objects.create_user(username="alice"))


@pytest.mark.parametrize(
    "scenario", [scenario_interrupt, scenario_rollback, scenario_reject, scenario_enqueue], ids=lambda f: f.__name__
)
def test_each_strategy_with_real_workers(api, workers, worker_env, scenario):
    try:
        scenario(api, Path(worker_env["NRLLM_CALL_JOURNAL"]), timeout=90)
    except AssertionError:
        print(workers.logs())
        raise
