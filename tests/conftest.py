"""Shared fixtures. PostgreSQL and Redis are required where a test asks for them: a test that
cannot reach them fails, it never skips."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


# The test matrix (make test, .ci/run): the whole suite runs once, on PostgreSQL. The SQLite tier
# runs what behaves differently by database (the store's portable statements, the runtime, the
# cancel poll, the in-process executor, the rate counters) plus one end-to-end smoke of each
# surface (marked ``sqlite``); the Django 5.2 tier runs the unit and integration tests of the
# store, the runtime and the surfaces (Makefile, test-django52).
SQLITE_TIER = (
    "tests/integration/store/",
    "tests/integration/runtime/",
    "tests/integration/live/",
    "tests/integration/executors/",
    "tests/integration/admission/",
)


def pytest_collection_modifyitems(config, items):
    """Markers by need, from where a test is and what it uses; then the tier's selection.

    ``postgres_only`` tests (LISTEN/NOTIFY, row locks across threads) are left out of a run on
    another database; where PostgreSQL is the database they run, and fail if it is down. With
    ``NRLLM_TEST_TIER=sqlite`` only the SQLite tier's tests are kept.
    """
    for item in items:
        path = item.nodeid
        if item.get_closest_marker("postgres_only") is not None:
            item.add_marker(pytest.mark.postgres)
        fixtures = set(getattr(item, "fixturenames", ()))
        # child_env is the environment of a child process: a test that takes it starts one
        if path.startswith("tests/e2e/") or "child_env" in fixtures:
            item.add_marker(pytest.mark.processes)
        if {"page", "browser_context"} & fixtures:
            item.add_marker(pytest.mark.browser)
    url = os.environ.get("DATABASE_URL", "")
    keep = items
    if not url.startswith(("postgres://", "postgresql://")):
        keep = [item for item in keep if item.get_closest_marker("postgres_only") is None]
    if os.environ.get("NRLLM_TEST_TIER") == "sqlite":
        keep = [i for i in keep if i.nodeid.startswith(SQLITE_TIER) or i.get_closest_marker("sqlite") is not None]
    if len(keep) != len(items):
        kept = set(map(id, keep))
        config.hook.pytest_deselected(items=[i for i in items if id(i) not in kept])
        items[:] = keep


def is_postgres() -> bool:
    from django.db import connection

    return connection.vendor == "postgresql"


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup):
    """pytest-django's test database; the cancel watcher's listening connection is closed
    before that database is dropped."""
    yield
    from nrllm_agents.live.deltas import publisher
    from nrllm_agents.live.interrupts import watcher
    from nrllm_agents.live.push import hub

    watcher.stop()
    hub.stop()
    publisher.stop()


def race_rounds(default: int) -> int:
    """Rounds a race test repeats: ``default``, or ``NRLLM_RACE_ROUNDS`` for every race test
    alike (e.g. ``NRLLM_RACE_ROUNDS=200`` before a release); at most ``NRLLM_RACE_ROUNDS_CAP``
    when that is set (the Django 5.2 tier: the races are repeated in full on the main stack, the
    older one shows that the same code runs there)."""
    value = os.environ.get("NRLLM_RACE_ROUNDS")
    rounds = int(value) if value else default
    cap = os.environ.get("NRLLM_RACE_ROUNDS_CAP")
    return min(rounds, int(cap)) if cap else rounds


@pytest.fixture
def runtime():
    from nrllm_agents.runtime.agent_runtime import AgentRuntime

    return AgentRuntime()


@pytest.fixture
def alice(django_user_model):
    """An ordinary user (password ``alice-pw``)."""
    return django_user_model.objects.create_user("alice", password="alice-pw")


@pytest.fixture
def bob(django_user_model):
    """Another ordinary user (password ``bob-pw``): owns runs alice must not see."""
    return django_user_model.objects.create_user("bob", password="bob-pw")


@pytest.fixture
def test_database_url(django_db_setup) -> str:
    """A URL that points child processes at the test database."""
    from django.db import connection

    s = connection.settings_dict
    if connection.vendor == "postgresql":
        return f"postgres://{s['USER'] or 'postgres'}@{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}/{s['NAME']}"
    return f"sqlite:///{s['NAME']}"


@pytest.fixture
def redis_url() -> str:
    """The Redis used by tests (a dedicated db number, flushed). Fails when Redis is down."""
    import redis

    url = os.environ.get("NRLLM_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
    client = redis.Redis.from_url(url)
    try:
        client.ping()
    except redis.RedisError as exc:
        pytest.fail(f"Redis is required at {url} and is not reachable: {exc}")
    client.flushdb()
    yield url
    client.flushdb()


@pytest.fixture
def child_env(test_database_url, tmp_path) -> dict[str, str]:
    """Environment for a child process (manage.py command, rqworker) on the test database."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    env.update(
        {
            "DATABASE_URL": test_database_url,
            # the site's settings with the suite's password hasher (config/test_settings.py):
            # a server checks the passwords of the users a test created
            "DJANGO_SETTINGS_MODULE": "config.test_settings",
            "PYTHONPATH": str(ROOT),
            "PYTHONUNBUFFERED": "1",
            "NRLLM_CALL_JOURNAL": str(tmp_path / "journal.jsonl"),
            # Workers reap and sweep by themselves (maintenance.py) at start, then every hour
            # here: a drill reaps when it chooses; a test of that maintenance shortens it.
            "NRLLM_MAINTENANCE_SECONDS": "3600",
            # An agent_worker's SIGTERM cuts the steps in flight short at once (a stopped test's
            # worker leaves at once); the drain's own tests set a grace period.
            "NRLLM_WORKER_DRAIN_SECONDS": "0",
        }
    )
    env.pop("REDIS_URL", None)
    return env


def manage(*args: str, env: dict[str, str], **kwargs) -> subprocess.Popen:
    """Start ``manage.py`` with the given arguments in a child process."""
    return subprocess.Popen(
        [sys.executable, str(ROOT / "manage.py"), *args],
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kwargs,
    )
