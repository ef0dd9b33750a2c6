"""Connections: keys encrypted at rest, write-only everywhere, and sent only to their server.

The commands run as real ``manage.py`` processes (the key goes in on stdin); runs go through
the real ``openai`` SDK to the shipped chat-completions server, which records the
``Authorization`` header it received; the dump is a real ``pg_dump`` of the test database.
"""

from __future__ import annotations

import importlib
import json
import logging
import shutil
import subprocess

import pytest
from cryptography.fernet import Fernet
from django.apps import apps as django_apps
from django.core.management import call_command
from django.test import override_settings

from nrllm_agents.catalog import connections, registry
from nrllm_agents.checks import check_settings
from nrllm_agents.crypto import vault
from nrllm_agents.models import AgentRun, AgentRunEvent, Connection
from nrllm_agents.observability.logs import QUIET_LOGGERS
from nrllm_agents.presentation.outcomes import Outcome
from nrllm_agents.testing.chat_server import ChatCompletionServer
from nrllm_agents.validation.run_request import InvalidRequest, RunRequest
from tests.conftest import ROOT, is_postgres, manage

KEY = "sk-conn-7f3a9c1e5b2d4f6a8c0e1a3b5d7f9e2c"
URL_PASSWORD = "pw-url-4d8e2a6c0b9f"


def add(child_env, name: str, key: str, *extra: str) -> subprocess.CompletedProcess:
    proc = manage("agent_connections", "add", name, "--kind", "openai", *extra, env=child_env, stdin=subprocess.PIPE)
    out, err = proc.communicate(key + "\n", timeout=60)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def command(child_env, *args: str) -> subprocess.CompletedProcess:
    proc = manage("agent_connections", *args, env=child_env)
    out, err = proc.communicate(timeout=60)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


# transaction=True: the commands are other processes, which see only committed rows.
@pytest.mark.django_db(transaction=True)
def test_add_reads_the_key_from_stdin_and_list_never_shows_it(child_env):
    done = add(child_env, "local", KEY, "--base-url", "http://127.0.0.1:9/v1", "--model", "m1")
    assert done.returncode == 0, done.stderr
    assert KEY not in done.stdout + done.stderr and "with a key" in done.stdout
    row = Connection.objects.get(name="local")
    assert row.encrypted_key and KEY not in row.encrypted_key and row.api_key() == KEY
    assert KEY not in repr(row) + str(row)

    human, as_json = command(child_env, "list"), command(child_env, "list", "--json")
    assert human.returncode == as_json.returncode == 0
    assert "local" in human.stdout and "key set" in human.stdout
    assert json.loads(as_json.stdout) == {
        "name": "local",
        "kind": "openai",
        "base_url": "http://127.0.0.1:9/v1",
        "default_model": "m1",
        "has_key": True,
        "updated_at": row.updated_at.isoformat(),
    }
    for text in (human.stdout, human.stderr, as_json.stdout, as_json.stderr):
        assert KEY not in text and row.encrypted_key not in text

    again = add(child_env, "local", "sk-other", "--base-url", "http://127.0.0.1:9/v1")
    assert again.returncode == 2 and "exists" in again.stderr and "sk-other" not in again.stderr
    escape = add(child_env, "esc", KEY, "--base-url", "http://127.0.0.1:9/v1", "--model", "\x1b[31mred")
    assert escape.returncode == 2 and "default_model" in escape.stderr and "\x1b" not in escape.stderr
    bad = add(child_env, "bad name", KEY, "--base-url", "not a url")
    assert bad.returncode == 2 and KEY not in bad.stderr
    assert "name" in bad.stderr and "base_url" in bad.stderr
    assert list(Connection.objects.values_list("name", flat=True)) == ["local"]

    gone = command(child_env, "remove", "local")
    assert gone.returncode == 0 and not Connection.objects.exists()
    assert command(child_env, "remove", "local").returncode == 1


@pytest.mark.processes
@pytest.mark.postgres_only
@pytest.mark.django_db(transaction=True)  # pg_dump reads committed rows from another connection
def test_a_pg_dump_of_the_database_holds_no_key_in_clear_text(test_database_url, tmp_path):
    assert is_postgres()
    pg_dump = shutil.which("pg_dump")
    assert pg_dump, "pg_dump is required (postgresql-client)"
    row, _ = connections.save("dumped", kind="openai", base_url="http://127.0.0.1:9/v1", api_key=KEY)
    with ChatCompletionServer([{"content": "hi"}], api_key=KEY) as server:
        Connection.objects.filter(pk=row.pk).update(base_url=server.base_url)
        result = _run_through("dumped", "m")
        assert result.outcome == Outcome.COMPLETED
    with_password, _ = connections.save("proxied", kind="openai", base_url=f"http://dbuser:{URL_PASSWORD}@10.0.0.9/v1")
    dump = subprocess.run([pg_dump, "--data-only", test_database_url], capture_output=True, timeout=120)
    assert dump.returncode == 0, dump.stderr.decode()
    assert b"dumped" in dump.stdout and row.encrypted_key.encode() in dump.stdout  # the dump can fail
    assert with_password.encrypted_userinfo.encode() in dump.stdout and b"http://10.0.0.9/v1" in dump.stdout
    assert KEY.encode() not in dump.stdout
    assert KEY[3:15].encode() not in dump.stdout  # nor a recognisable part of it
    assert URL_PASSWORD.encode() not in dump.stdout and b"dbuser" not in dump.stdout  # the URL's credentials


@pytest.mark.django_db
def test_a_url_s_credentials_are_encrypted_at_rest_and_the_provider_gets_the_whole_url():
    url = f"http://dbuser:{URL_PASSWORD}@10.0.0.9:8080/v1"
    row, _ = connections.save("proxied", kind="openai", base_url=url, api_key=KEY)
    stored = Connection.objects.filter(pk=row.pk).values("base_url", "encrypted_userinfo").get()
    assert stored["base_url"] == "http://10.0.0.9:8080/v1" and URL_PASSWORD not in stored["encrypted_userinfo"]
    assert connections.public_dict(row)["base_url"] == "http://***@10.0.0.9:8080/v1"  # the API masks it
    provider = registry.connection_provider(
        RunRequest.from_mapping({"prompt": "p", "connection": "proxied", "model": "m"})
    )
    assert provider.base_url == url  # type: ignore[attr-defined]
    again, _ = connections.save("proxied", kind="openai", base_url="http://***@10.0.0.9:8080/v1", replace=True)
    assert again.url() == url  # given back masked: kept


@pytest.mark.django_db
def test_the_data_migration_encrypts_the_credentials_of_existing_urls():
    migration = importlib.import_module("nrllm_agents.migrations.0026_connection_encrypted_userinfo")
    url = f"http://dbuser:{URL_PASSWORD}@10.0.0.9/v1"
    row, _ = connections.save("old", kind="openai", base_url="http://10.0.0.9/v1")
    Connection.objects.filter(pk=row.pk).update(base_url=url)  # as a row stored before it
    migration.encrypt_userinfo(django_apps, None)
    row.refresh_from_db()
    assert row.base_url == "http://10.0.0.9/v1" and row.has_userinfo and row.url() == url
    migration.decrypt_userinfo(django_apps, None)  # and back
    assert Connection.objects.get(pk=row.pk).base_url == url


@pytest.mark.django_db
def test_staff_who_may_only_view_a_connection_see_neither_its_key_nor_its_url_s_password(
    django_user_model, client, monkeypatch
):
    from django.contrib.auth.models import Permission

    row, _ = connections.save(
        "viewed", kind="openai", base_url=f"http://dbuser:{URL_PASSWORD}@10.0.0.9/v1", api_key=KEY
    )
    viewer = django_user_model.objects.create_user("viewer", password="pw", is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_connection"))
    client.force_login(viewer)

    def never(self):
        raise AssertionError("the admin decrypted a key for a page")

    for decrypting in ("api_key", "url"):
        monkeypatch.setattr(Connection, decrypting, never)
    for url in ("/admin/nrllm_agents/connection/", f"/admin/nrllm_agents/connection/{row.pk}/change/"):
        page = client.get(url)
        html = page.content.decode()
        assert page.status_code == 200 and "viewed" in html
        assert KEY not in html and KEY[3:15] not in html and URL_PASSWORD not in html and "dbuser" not in html
    change = client.get(f"/admin/nrllm_agents/connection/{row.pk}/change/").content.decode()
    assert "http://***@10.0.0.9/v1" in change and "set (write-only)" in change


def _run_through(name: str, model: str = "", **extra):
    from nrllm_agents.runtime.agent_runtime import AgentRuntime

    data = {"prompt": "hello", "connection": name, "tools": [], **extra}
    if model:
        data["model"] = model
    return AgentRuntime().run(data)


@pytest.mark.django_db
def test_a_run_through_a_connection_sends_that_connections_key_and_records_none(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-environment-key-must-not-be-used")
    with (
        ChatCompletionServer([{"content": "through the connection", "usage": {"prompt_tokens": 3}}], api_key=KEY) as a,
        ChatCompletionServer([{"content": "keyless"}]) as b,
    ):
        monkeypatch.setenv("OPENAI_BASE_URL", b.base_url)  # never used by a connection
        connections.save("vendor", kind="openai", base_url=a.base_url, default_model="gpt-x", api_key=KEY)
        connections.save("local", kind="openai", base_url=b.base_url, default_model="llama")
        result = _run_through("vendor")
        assert result.outcome == Outcome.COMPLETED, result.error
        assert a.request_headers[-1]["authorization"] == f"Bearer {KEY}"
        assert a.requests[-1]["model"] == "gpt-x"  # the connection's default model
        run = AgentRun.objects.get(pk=result.run_id)
        assert (run.provider, run.connection, run.model, run.final_text) == (
            "openai",
            "vendor",
            "gpt-x",
            "through the connection",
        )
        stored = json.dumps([run.options, run.request_payload, list(AgentRunEvent.objects.values("payload"))])
        assert KEY not in stored and KEY not in run.error_message

        keyless = _run_through("local", "llama3")
        assert keyless.outcome == Outcome.COMPLETED, keyless.error
        assert "environment-key" not in b.request_headers[-1]["authorization"]
        assert len(a.requests) == 1  # nothing else went to the vendor's server


@pytest.mark.django_db
@pytest.mark.parametrize("kind", ["anthropic", "gemini"])
def test_a_connection_of_each_native_kind_sends_its_key_through_its_vendors_sdk(monkeypatch, kind):
    """The Anthropic and Gemini connections build their provider by kind and send their own key
    in their vendor's header (x-api-key, x-goog-api-key), never the environment's."""
    from nrllm_agents.testing.anthropic_server import AnthropicServer
    from nrllm_agents.testing.gemini_server import GeminiServer

    for variable in ("ANTHROPIC_API_KEY", "GEMINI_API_KEY", "GOOGLE_API_KEY"):
        monkeypatch.setenv(variable, "environment-key-must-not-be-used")
    server_class = AnthropicServer if kind == "anthropic" else GeminiServer
    with server_class([{"content": f"through {kind}", "usage": {"prompt_tokens": 3}}], api_key=KEY) as server:
        connections.save(f"{kind}-vendor", kind=kind, base_url=server.base_url, default_model="m-1", api_key=KEY)
        result = _run_through(f"{kind}-vendor")
        assert result.outcome == Outcome.COMPLETED, result.error
        sent = server.request_headers[-1]
        # Anthropic's SDK sends the key as x-api-key or as a bearer token; Gemini's as x-goog-api-key.
        keys = {
            sent.get("x-api-key"),
            sent.get("x-goog-api-key"),
            sent.get("authorization", "").removeprefix("Bearer "),
        }
        assert KEY in keys and "environment-key-must-not-be-used" not in json.dumps(sent)
        run = AgentRun.objects.get(pk=result.run_id)
        assert (run.provider, run.connection, run.model, run.final_text) == (
            kind,
            f"{kind}-vendor",
            "m-1",
            f"through {kind}",
        )
        stored = json.dumps([run.options, run.request_payload, list(AgentRunEvent.objects.values("payload"))])
        assert KEY not in stored


@pytest.mark.django_db
def test_a_queued_run_stores_the_connection_name_and_never_its_key():
    connections.save("vendor", kind="openai", base_url="http://127.0.0.1:9/v1", default_model="m", api_key=KEY)
    request = RunRequest.from_mapping({"prompt": "p", "connection": "vendor"})
    assert (request.provider, request.model, request.connection) == ("openai", "m", "vendor")
    assert request.as_dict()["connection"] == "vendor" and KEY not in json.dumps(request.as_dict())
    assert RunRequest.from_mapping(request.as_dict()) == request
    with pytest.raises(InvalidRequest) as refused:
        RunRequest.from_mapping({"prompt": "p", "connection": "nope"})
    # No caller the policy lets see connections: none is named (a worker, a run's stored error).
    assert refused.value.errors["connection"] == "unknown connection"
    with pytest.raises(InvalidRequest) as mismatch:
        RunRequest.from_mapping({"prompt": "p", "connection": "vendor", "provider": "scripted"})
    assert "provider" in mismatch.value.errors


@pytest.mark.django_db
def test_a_failed_call_through_a_connection_never_names_its_key(caplog):
    caplog.set_level(logging.DEBUG)
    for name in QUIET_LOGGERS:  # the SDK's own debug lines too, which the settings leave out
        caplog.set_level(logging.DEBUG, logger=name)
    with ChatCompletionServer([{"content": "x"}], api_key="sk-the-right-one") as server:
        connections.save("wrong", kind="openai", base_url=server.base_url, default_model="m", api_key=KEY)
        result = _run_through("wrong")
    assert result.outcome == Outcome.FAILED and "401" in result.error
    assert KEY not in result.error and KEY not in json.dumps(list(AgentRunEvent.objects.values("payload")))
    assert caplog.records and KEY not in caplog.text  # nor in any log line, at any level


@pytest.mark.django_db
def test_rotate_re_encrypts_with_the_first_key_and_the_old_key_can_then_go():
    old, new = Fernet.generate_key().decode(), Fernet.generate_key().decode()
    with override_settings(NRLLM_AGENTS={"SECRET_KEYS": [old]}):
        row, _ = connections.save("c", kind="openai", base_url="http://127.0.0.1:9/v1", api_key=KEY)
    with override_settings(NRLLM_AGENTS={"SECRET_KEYS": [new]}), pytest.raises(vault.VaultError) as unreadable:
        Connection.objects.get(pk=row.pk).api_key()
    assert KEY not in str(unreadable.value)
    with override_settings(NRLLM_AGENTS={"SECRET_KEYS": f"{new},{old}"}):
        call_command("agent_connections", "rotate", stdout=open("/dev/null", "w"))
    rotated = Connection.objects.get(pk=row.pk)
    assert rotated.encrypted_key != row.encrypted_key
    with override_settings(NRLLM_AGENTS={"SECRET_KEYS": [new]}):
        assert rotated.api_key() == KEY


@pytest.mark.django_db
def test_without_keys_production_refuses_and_development_derives_one():
    with override_settings(NRLLM_AGENTS={"SECRET_KEYS": ""}, DEBUG=False):
        errors = [m for m in check_settings() if m.id == "nrllm_agents.E014"]
        assert errors and "SECRET_KEYS" in errors[0].msg
        with pytest.raises(vault.VaultError):
            vault.encrypt(KEY)
    with override_settings(NRLLM_AGENTS={"SECRET_KEYS": "not-a-fernet-key"}):
        assert any(m.id == "nrllm_agents.E014" and "not a Fernet key" in m.msg for m in check_settings())
    with override_settings(NRLLM_AGENTS={"SECRET_KEYS": ""}, DEBUG=True):
        assert not [m for m in check_settings() if m.id == "nrllm_agents.E014"]
        token = vault.encrypt(KEY)
        assert vault.decrypt(token) == KEY and KEY not in token
    assert (ROOT / "nrllm_agents" / "crypto" / "vault.py").exists()


@pytest.mark.django_db
def test_the_admin_takes_a_key_and_never_shows_it(admin_client):
    page = admin_client.get("/admin/nrllm_agents/connection/add/")
    assert page.status_code == 200
    created = admin_client.post(
        "/admin/nrllm_agents/connection/add/",
        {"name": "adm", "kind": "openai", "base_url": "http://127.0.0.1:9/v1", "default_model": "m", "api_key": KEY},
    )
    assert created.status_code == 302
    row = Connection.objects.get(name="adm")
    assert row.api_key() == KEY
    for url in ("/admin/nrllm_agents/connection/", f"/admin/nrllm_agents/connection/{row.pk}/change/"):
        html = admin_client.get(url).content.decode()
        assert "adm" in html and KEY not in html and row.encrypted_key not in html
    kept = admin_client.post(
        f"/admin/nrllm_agents/connection/{row.pk}/change/",
        {"name": "adm", "kind": "openai", "base_url": "http://127.0.0.1:9/v1", "default_model": "m2", "api_key": ""},
    )
    assert kept.status_code == 302
    row.refresh_from_db()
    assert row.default_model == "m2" and row.api_key() == KEY  # an empty field keeps the key


@pytest.mark.django_db
def test_the_api_takes_a_key_and_never_returns_it(django_user_model, alice):
    from django.contrib.auth.models import Permission
    from rest_framework.test import APIClient

    staff = django_user_model.objects.create_user("ops", password="pw", is_staff=True)
    staff.user_permissions.add(*Permission.objects.filter(codename__endswith="_connection"))
    ops, outsider = APIClient(), APIClient()
    ops.force_authenticate(staff)
    outsider.force_authenticate(alice)
    body = {"name": "api", "kind": "openai", "base_url": "http://127.0.0.1:9/v1", "default_model": "m", "api_key": KEY}
    assert outsider.post("/api/connections/", body, format="json").status_code == 403
    assert outsider.get("/api/connections/").status_code == 403
    created = ops.post("/api/connections/", body, format="json")
    assert created.status_code == 201 and created.json()["has_key"] is True
    answers = [created, ops.get("/api/connections/"), ops.get("/api/connections/api/")]
    edited = ops.put("/api/connections/api/", {**body, "api_key": None} | {"default_model": "m2"}, format="json")
    assert edited.status_code == 400  # null is not a key
    kept = {k: v for k, v in body.items() if k not in ("name", "api_key")} | {"default_model": "m2"}
    answers.append(ops.put("/api/connections/api/", kept, format="json"))
    assert answers[-1].status_code == 200 and answers[-1].json()["default_model"] == "m2"
    assert Connection.objects.get(name="api").api_key() == KEY  # left out: kept
    refused = ops.post("/api/connections/", {**body, "name": "api2", "base_url": "not a url"}, format="json")
    assert refused.status_code == 400 and "base_url" in refused.json()
    answers.append(refused)
    for answer in answers:
        assert KEY not in answer.content.decode()
    cleared = ops.put("/api/connections/api/", {**kept, "clear_key": True}, format="json")
    assert cleared.json()["has_key"] is False and not Connection.objects.get(name="api").has_key
    assert ops.delete("/api/connections/api/").status_code == 204 and not Connection.objects.exists()
