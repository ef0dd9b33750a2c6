"""Acceptance: the quickstart's host project, moved to production's parts as the docs say
(docs/operations/workers.md): ``nrllm-agents[postgres]``, a PostgreSQL database, ``REDIS_URL`` and
an RQ worker. A run posted to ``agents/api/runs/`` is executed by the worker, not by the web
process, and a run cancelled in flight there stops with its record.

The host project gets a database of its own (created and dropped here) and the tests' Redis db.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from tests.e2e.processes import wait_for

from . import quickstart as qs
from .test_quickstart import PASSWORD, Client, _run, cancel_in_flight, serving

pytestmark = pytest.mark.postgres_only

SERVER = "postgresql://postgres@127.0.0.1:5432"


@pytest.fixture
def host_database() -> Iterator[str]:
    name = f"nrllm_host_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(f"{SERVER}/postgres", autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield name
    finally:
        with psycopg.connect(f"{SERVER}/postgres", autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_the_docs_say_what_the_test_does() -> None:
    page = qs.WORKERS_DOC.read_text()
    assert qs.WORKERS in page and qs.RQWORKER in page and qs.INSTALL_CHECKOUT_POSTGRES in page


def test_on_postgresql_and_redis_runs_execute_on_an_rq_worker(
    host_python_postgres: Path, host_database: str, redis_url: str, tmp_path: Path
) -> None:
    root = tmp_path / "host-project"
    root.mkdir()
    python = host_python_postgres
    _run(python, qs.STARTPROJECT, root)
    database = (
        'DATABASES = {"default": {"ENGINE": "django.db.backends.postgresql", '
        f'"NAME": "{host_database}", "USER": "postgres", "HOST": "127.0.0.1", "PORT": "5432"}}}}\n'
    )
    with open(root / "mysite" / "settings.py", "a") as f:
        f.write("\n" + qs.SETTINGS + "\n" + qs.WORKERS + "\n" + database)
    with open(root / "mysite" / "urls.py", "a") as f:
        f.write("\n" + qs.URLS)
    env = {"REDIS_URL": redis_url}
    _run(python, qs.MIGRATE, root, env=env)
    _run(python, qs.CREATESUPERUSER, root, "--noinput", "--username", "admin", "--email", "a@example.com",
         env={**env, "DJANGO_SUPERUSER_PASSWORD": PASSWORD})  # fmt: skip
    checked = _run(python, "python manage.py check", root, env=env)
    assert "nrllm_agents." not in checked, checked  # no error or warning of ours
    token = re.search(r"token (\w+) for", _run(python, "python manage.py drf_create_token admin", root, env=env))
    assert token, "drf_create_token printed no token"

    with (
        serving(python, root, qs.RUNSERVER, env) as (base, _, _),
        serving(python, root, qs.RQWORKER, env) as (_, worker_log, _),
        Client(base + "/agents/api/") as api,
    ):
        api.headers["Authorization"] = f"Token {token.group(1)}"
        script = [{"tool_calls": [{"name": "calculator", "arguments": {"expression": "6*7"}}]}, {"content": "42"}]
        created = api.post("runs/", json={"prompt": "six times seven", "tools": ["calculator"], "script": script})
        assert created.status_code == 202 and created.json()["outcome"] == "queued", created.text
        run_id = created.json()["run_id"]
        run = wait_for(
            what="the worker to complete the run",
            predicate=lambda: (r := api.get(f"runs/{run_id}/").json())["status"] in ("completed", "failed") and r,
        )
        assert (run["status"], run["final_text"]) == ("completed", "42"), run

        long = [{"tool_calls": [{"name": "sleep", "arguments": {"seconds": 30}}]}, {"content": "never"}]
        second = api.post("runs/", json={"prompt": "wait", "tools": ["sleep"], "script": long}).json()["run_id"]
        events = cancel_in_flight(api, second, once_recorded="llm")
        assert events[-1]["kind"] == "cancelled" and events[-1]["payload"]["interrupted"], events[-1]

    # executed by the worker: RQ logs each job it starts, with the run's id
    log = worker_log.read_text()
    assert f"Job OK (nrllm-run-{run_id}-" in log and f"Job OK (nrllm-run-{second}-" in log, log[-3000:]
