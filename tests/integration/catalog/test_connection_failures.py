"""Issue 32 findings 3 and 5: a connection's failures name the connection, never its URL, and
a key that cannot be decrypted is a configuration failure.

Guards: a failed call told the connection's non-staff owner ``set OPENAI_BASE_URL: no server
answered at http://user:S3cretPass@127.0.0.1:58999/v1`` in ``GET /api/runs/{id}/`` and its events
(the hint names a variable a connection never reads); and a wrong ``NRLLM_SECRET_KEYS`` started
cleanly, then failed every run on a connection as ``internal_error`` with a traceback.

The calls are real: each vendor's SDK against a loopback port nothing listens on.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys

import pytest
from cryptography.fernet import Fernet
from django.test import Client, override_settings
from rest_framework.test import APIClient

from nrllm_agents.catalog import connections
from nrllm_agents.checks import connection_key_problems
from nrllm_agents.models import AgentRun, AgentRunEvent, RunStatus
from nrllm_agents.runtime.agent_runtime import AgentRuntime
from tests.conftest import ROOT

KEY = "sk-conn-7f3a9c1e5b2d4f6a8c0e1a3b5d7f9e2c"
PASSWORD = "S3cretPass"
KINDS = ["openai", "anthropic", "gemini"]


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def leaks(text: str, port: int) -> list[str]:
    return [part for part in (PASSWORD, "user:", "127.0.0.1", str(port), "token=abc") if part in text]


@pytest.mark.django_db
@pytest.mark.parametrize("kind", KINDS)
def test_a_failed_call_names_the_connection_never_its_url(kind, alice, caplog):
    caplog.set_level(logging.DEBUG)
    port = closed_port()
    url = f"http://user:{PASSWORD}@127.0.0.1:{port}/v1?token=abc"
    connections.save("edge", kind=kind, base_url=url, default_model="m-1", api_key=KEY)
    api = APIClient()
    api.force_authenticate(alice)
    answer = api.post(
        "/api/runs/", {"prompt": "hello", "connection": "edge", "mode": "sync", "tools": []}, format="json"
    )
    assert answer.status_code == 201, answer.content
    run = AgentRun.objects.get()
    shown = api.get(f"/api/runs/{run.pk}/")
    events = api.get(f"/api/runs/{run.pk}/events/")
    seen = json.dumps([answer.json(), shown.json(), events.json()])
    seen += run.error_message + json.dumps(list(AgentRunEvent.objects.values_list("payload", flat=True)))
    assert "connection 'edge'" in run.error_message, run.error_message
    assert "OPENAI_BASE_URL" not in seen and "_BASE_URL" not in seen
    assert leaks(seen, port) == [], seen
    below_warning = "\n".join(r.getMessage() for r in caplog.records if r.levelno < logging.WARNING)
    assert leaks(below_warning, port) == [], below_warning


@pytest.mark.django_db
def test_staff_see_the_url_on_the_connections_admin_page_with_the_userinfo_masked(admin_client):
    row, _ = connections.save(
        "edge", kind="openai", base_url=f"http://user:{PASSWORD}@127.0.0.1:9/v1", default_model="m", api_key=KEY
    )
    page = admin_client.get(f"/admin/nrllm_agents/connection/{row.pk}/change/").content.decode()
    listing = admin_client.get("/admin/nrllm_agents/connection/").content.decode()
    assert "127.0.0.1:9/v1" in page and PASSWORD not in page and PASSWORD not in listing
    assert "http://***@127.0.0.1:9/v1" in page


@pytest.mark.django_db
def test_a_non_staff_owner_never_sees_a_connections_url(alice):
    connections.save(
        "edge", kind="openai", base_url=f"http://user:{PASSWORD}@127.0.0.1:9/v1", default_model="m", api_key=KEY
    )
    browser = Client()
    browser.force_login(alice)
    page = browser.get("/playground/").content.decode()
    assert PASSWORD not in page and "127.0.0.1:9" not in page


@pytest.mark.django_db
def test_saving_the_admin_page_with_the_mask_keeps_the_userinfo(admin_client):
    url = f"http://user:{PASSWORD}@127.0.0.1:9/v1"
    row, _ = connections.save("edge", kind="openai", base_url=url, default_model="m", api_key=KEY)
    form = {"name": "edge", "kind": "openai", "base_url": "http://***@127.0.0.1:9/v1", "default_model": "m2"}
    assert admin_client.post(f"/admin/nrllm_agents/connection/{row.pk}/change/", form).status_code == 302
    row.refresh_from_db()
    assert row.url() == url and row.default_model == "m2" and row.api_key() == KEY
    assert PASSWORD not in row.base_url + row.encrypted_userinfo  # encrypted at rest
    form["base_url"] = "http://other:pw@127.0.0.1:9/v1"
    assert admin_client.post(f"/admin/nrllm_agents/connection/{row.pk}/change/", form).status_code == 302
    row.refresh_from_db()
    assert row.url() == "http://other:pw@127.0.0.1:9/v1" and row.base_url == "http://127.0.0.1:9/v1"


def _saved_under(old: str, kind: str = "openai", name: str = "edge") -> None:
    with override_settings(NRLLM_AGENTS={"SECRET_KEYS": [old]}):
        connections.save(name, kind=kind, base_url="http://127.0.0.1:9/v1", default_model="m", api_key=KEY)


@pytest.mark.django_db
@pytest.mark.parametrize("mode", ["sync", "queued"])
def test_a_run_whose_key_cannot_be_decrypted_fails_as_configuration_not_retried(mode, alice, caplog, settings):
    settings.REDIS_URL = None
    settings.NRLLM_AGENTS = {**settings.NRLLM_AGENTS, "EXECUTOR": "local", "QUEUED_SWEEP_SECONDS": 0}
    old, new = Fernet.generate_key().decode(), Fernet.generate_key().decode()
    _saved_under(old)
    caplog.set_level(logging.DEBUG)
    runtime = AgentRuntime()
    data = {"prompt": "hello", "connection": "edge", "tools": []}
    with override_settings(NRLLM_AGENTS={**settings.NRLLM_AGENTS, "SECRET_KEYS": [new]}):
        if mode == "sync":
            runtime.run(data, owner=alice)
        else:
            run_id = runtime.enqueue(data, owner=alice)
            runtime.run_queued(run_id)
    run = AgentRun.objects.get()
    assert (run.status, run.termination_reason) == (RunStatus.FAILED, "configuration_failed")
    assert run.attempts <= 1, "retried"
    assert "connection 'edge'" in run.error_message and "agent_connections rotate" in run.error_message
    assert KEY not in run.error_message
    assert not [r for r in caplog.records if r.exc_info], "a traceback was logged"
    assert "unexpected error" not in caplog.text


@pytest.mark.django_db
def test_the_key_check_opens_one_key_of_each_kind(settings):
    old, new = Fernet.generate_key().decode(), Fernet.generate_key().decode()
    _saved_under(old, "openai", "a-openai")
    _saved_under(old, "gemini", "a-gemini")
    with override_settings(NRLLM_AGENTS={"SECRET_KEYS": [old]}):
        assert connection_key_problems() == []
    with override_settings(NRLLM_AGENTS={"SECRET_KEYS": [new]}):
        found = connection_key_problems()
    assert [m.id for m in found] == ["nrllm_agents.E017", "nrllm_agents.E017"]
    assert "connection 'a-gemini' (gemini)" in found[0].msg and "agent_connections rotate" in found[0].hint
    with override_settings(NRLLM_AGENTS={"SECRET_KEYS": f"{new},{old}"}):
        assert connection_key_problems() == []


@pytest.mark.processes
def test_manage_py_check_and_check_deploy_fail_on_a_wrong_key_list(tmp_path):
    """Real processes on a migrated SQLite file: the key added under one list, checked under another."""
    old, new = Fernet.generate_key().decode(), Fernet.generate_key().decode()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "PYTEST", "NRLLM_SECRET_KEYS"))}
    env.update(
        DJANGO_SETTINGS_MODULE="config.settings",
        DJANGO_SECRET_KEY="k" * 60,
        DJANGO_DEBUG="1",
        DATABASE_URL=f"sqlite:///{tmp_path / 'db.sqlite3'}",
        NRLLM_SECRET_KEYS=old,
    )

    def manage(*args: str, stdin: str = "", **extra: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=ROOT,
            env={**env, **extra},
            input=stdin,
            capture_output=True,
            text=True,
            timeout=180,
        )

    assert manage("migrate", "-v0").returncode == 0
    added = manage(
        "agent_connections", "add", "edge", "--kind", "openai", "--base-url", "http://127.0.0.1:9/v1", stdin=KEY
    )
    assert added.returncode == 0, added.stderr
    assert manage("check").returncode == 0
    for args in (["check"], ["check", "--deploy"]):
        done = manage(*args, NRLLM_SECRET_KEYS=new)
        assert done.returncode != 0 and "nrllm_agents.E017" in done.stderr, done.stderr
        assert "connection 'edge'" in done.stderr and "agent_connections rotate" in done.stderr
        assert KEY not in done.stdout + done.stderr
