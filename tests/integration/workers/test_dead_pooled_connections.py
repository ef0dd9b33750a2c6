"""Issue 32 finding 14: after PostgreSQL terminated its backends, each process's pool still
handed out the dead idle connections; each failed one job claim or one maintenance pass.

Here the pool is the one the settings build (Django's psycopg pool); every idle backend of the
test database is terminated with ``pg_terminate_backend``, three rounds over, and the next
claim and the next maintenance pass must succeed at once. ``transaction=True``: the claims and
passes run on threads of their own, with their own pooled connections.
"""

from __future__ import annotations

import logging
import threading

import pytest
from django.conf import settings
from django.db import connection, connections

from nrllm_agents import store
from nrllm_agents.models import AgentRun, RunStatus
from nrllm_agents.validation.run_request import RunRequest
from nrllm_agents.workers import maintenance
from tests.conftest import is_postgres

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]


def on_thread(fn):
    """Run ``fn`` on a new thread (a fresh Django connection, drawn from the pool); return its
    result or raise its error."""
    box: dict[str, object] = {}

    def target():
        try:
            box["value"] = fn()
        except BaseException as exc:  # re-raised on the caller's thread
            box["error"] = exc
        finally:
            connections.close_all()  # back to the pool, idle

    thread = threading.Thread(target=target)
    thread.start()
    thread.join(60)
    if "error" in box:
        raise box["error"]  # type: ignore[misc]
    return box.get("value")


def fill_the_pool(n: int = 4) -> None:
    """Leave ``n`` idle connections in the pool: ``n`` threads each hold one at once."""
    barrier = threading.Barrier(n)

    def hold():
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        barrier.wait(30)

    threads = [threading.Thread(target=lambda: (hold(), connections.close_all())) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)


def terminate_idle_backends() -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid() AND state = 'idle'"
        )
        return int(cursor.fetchone()[0])


def test_after_every_backend_is_terminated_the_next_claim_and_maintenance_pass_succeed(caplog):
    if not is_postgres() or not settings.DATABASES["default"]["OPTIONS"].get("pool"):
        pytest.fail("this test needs PostgreSQL with the settings' connection pool")
    caplog.set_level(logging.WARNING)
    for round_ in range(3):
        fill_the_pool()
        assert terminate_idle_backends() >= 1, "no idle pooled connection to terminate"
        req = RunRequest.from_mapping({"prompt": f"round {round_}", "script": [{"content": "ok"}]})
        run = store.create_queued(req.row_fields(), req.as_dict())
        fill_the_pool()
        terminate_idle_backends()
        claimed = on_thread(lambda: store.claim_queued(run.pk, claimed_by=f"worker:{round_}"))
        assert claimed.applied, claimed
        assert AgentRun.objects.get(pk=run.pk).status == RunStatus.RUNNING
        fill_the_pool()
        terminate_idle_backends()
        caplog.clear()
        on_thread(lambda: maintenance.maintain("pool-test"))
        # The pass's own verdict: it logs "reaper failed" / "queued sweep failed" when a dead
        # connection reaches it. (The listener and psycopg_pool log their own reconnects of the
        # terminated backends meanwhile: not the pass's failure.)
        failures = [r.getMessage() for r in caplog.records if r.name == maintenance.logger.name]
        assert not [m for m in failures if "failed" in m], failures


def test_the_app_gives_every_postgresql_pool_a_check(settings):
    import django

    from nrllm_agents.store import db

    new = django.VERSION >= (6, 1)  # before 6.1 Django passes check= itself: CONN_HEALTH_CHECKS asks for it
    default = settings.DATABASES["default"]
    if new:
        assert default["OPTIONS"]["pool"]["check"] is db.check_pooled_connection
    else:
        assert default["CONN_HEALTH_CHECKS"] is True and "check" not in default["OPTIONS"]["pool"]
    own = object()
    settings.DATABASES = {
        "a": {"ENGINE": "django.db.backends.postgresql", "OPTIONS": {"pool": True}},
        "b": {"ENGINE": "django.db.backends.postgresql", "OPTIONS": {"pool": {"check": own}}},
        "c": {"ENGINE": "django.db.backends.sqlite3"},
    }
    assert db.check_pools_before_use() == ["a"]
    if new:
        assert settings.DATABASES["a"]["OPTIONS"]["pool"] == {"check": db.check_pooled_connection}
    else:
        assert settings.DATABASES["a"]["CONN_HEALTH_CHECKS"] is True
    assert settings.DATABASES["b"]["OPTIONS"]["pool"]["check"] is own  # the host's own choice stays
