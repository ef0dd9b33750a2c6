"""Issue 20 items 10 and 11: a careless deploy, with debug off, on a real gunicorn.

- A deploy that ran only ``migrate`` answered 500 to every rate-limited action (create, cancel,
  bulk cancel, API fork, playground start and cancel): the limits counted in a database cache
  whose table only ``createcachetable`` makes.
- With debug off, not one 500 traceback reached stderr: ``LOGGING`` configured only the
  ``nrllm_agents`` loggers, and Django prints ``django.request`` only in debug.

Each test starts its own database (PostgreSQL when the suite runs on it, else a SQLite file),
runs ``manage.py migrate`` and nothing else, and serves the app with gunicorn.
"""

from __future__ import annotations

import contextlib
import http.cookiejar
import json
import os
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.web.servers import serve

ROOT = Path(__file__).resolve().parents[3]
KEY = "k" * 10 + "0123456789abcdefghijklmnopqrstuvwxyz!@#$%^&*(-_=+)"
PASSWORD = "a long deploy-test password"


@contextlib.contextmanager
def fresh_database(tmp_path: Path) -> Iterator[str]:
    """An empty database of the suite's engine; dropped afterwards."""
    url = os.environ.get("DATABASE_URL", "")
    if not url.startswith(("postgres://", "postgresql://")):
        yield f"sqlite:///{tmp_path / 'fresh.sqlite3'}"
        return
    import psycopg

    parts = urllib.parse.urlsplit(url)
    name = f"{parts.path.lstrip('/') or 'nrllm'}_fresh_deploy"
    admin = parts._replace(path="/postgres").geturl()
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield parts._replace(path=f"/{name}").geturl()
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def production_env(database_url: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "PYTEST", "NRLLM_", "REDIS_URL"))}
    env.update(
        {
            "DJANGO_SETTINGS_MODULE": "config.settings",
            "DJANGO_SECRET_KEY": KEY,
            "DJANGO_ALLOWED_HOSTS": "127.0.0.1,localhost",
            "DATABASE_URL": database_url,
            "PYTHONPATH": str(ROOT),
            "PYTHONUNBUFFERED": "1",
            "NRLLM_ALLOW_SCRIPTED": "1",  # the runs below are scripted
            # Production configuration the README requires (the key connections' keys are
            # encrypted with); configuration, not a deploy step: `migrate` stays the only one.
            "NRLLM_SECRET_KEYS": "ZGVwbG95LXRlc3QtZmVybmV0LWtleS0zMi1ieXRlcyE=",
            "NRLLM_QUEUED_SWEEP_SECONDS": "0",
            **extra,
        }
    )
    return env


def manage(env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def only_migrate(env: dict[str, str]) -> str:
    """``migrate``, then a user with a password and an API token (printed)."""
    manage(env, "migrate", "--noinput", "-v0")
    script = (
        "from django.contrib.auth import get_user_model\n"
        "from rest_framework.authtoken.models import Token\n"
        f"u = get_user_model().objects.create_user('alice', password={PASSWORD!r})\n"
        "print(Token.objects.create(user=u).key)\n"
    )
    return manage(env, "shell", "-c", script).strip().splitlines()[-1]


class Http:
    """A tiny client: JSON in and out, a cookie jar for the playground's session and CSRF."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.jar = http.cookiejar.CookieJar()
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(self.jar))

    def call(self, method: str, path: str, *, body=None, form=None, headers=None) -> tuple[int, str]:
        data, sent = None, {"Accept": "application/json", **(headers or {})}
        if body is not None:
            data, sent["Content-Type"] = json.dumps(body).encode(), "application/json"
        elif form is not None:
            data, sent["Content-Type"] = urllib.parse.urlencode(form).encode(), "application/x-www-form-urlencoded"
        request = urllib.request.Request(self.base + path, data=data, headers=sent, method=method)
        try:
            with self.opener.open(request, timeout=60) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()

    def csrf(self) -> str:
        return next(c.value for c in self.jar if c.name == "csrftoken")

    def login(self, username: str, password: str) -> None:
        self.call("GET", "/accounts/login/")
        status, _ = self.call(
            "POST",
            "/accounts/login/",
            form={"username": username, "password": password, "csrfmiddlewaretoken": self.csrf()},
        )
        assert status in (200, 302) and any(c.name == "sessionid" for c in self.jar), status


@pytest.mark.sqlite  # the SQLite tier's smoke of this surface
def test_a_deploy_that_ran_only_migrate_serves_every_rate_limited_action(tmp_path):
    with fresh_database(tmp_path) as url:
        env = production_env(url)
        token = only_migrate(env)
        with serve("gunicorn", env, tmp_path) as base:
            api = Http(base)
            auth = {"Authorization": f"Token {token}"}
            answers = {}
            run = {"prompt": "p", "tools": [], "script": [{"content": "ok"}]}
            slow = {**run, "script": [{"delay": 30, "content": "ok"}]}  # still executing when cancelled
            status, text = api.call("POST", "/api/runs/", body=slow, headers=auth)
            answers["create"] = status
            run_id = json.loads(text)["run_id"] if status == 202 else None
            status, text = api.call("POST", "/api/runs/", body={**run, "mode": "sync"}, headers=auth)
            answers["create sync"] = status
            done_id = json.loads(text)["run_id"] if status == 201 else None
            answers["cancel"] = api.call("POST", f"/api/runs/{run_id}/cancel/", body={}, headers=auth)[0]
            answers["bulk cancel"] = api.call("POST", "/api/runs/cancel/", body={"status": ["queued"]}, headers=auth)[0]
            answers["fork"] = api.call("POST", f"/api/runs/{done_id}/fork/", body={}, headers=auth)[0]
            browser = Http(base)
            browser.login("alice", PASSWORD)
            form = {
                "prompt": "p",
                "provider": "scripted",
                "max_iterations": "3",
                "mode": "queued",
                "script": json.dumps(slow["script"]),
            }
            status, text = browser.call("POST", "/playground/runs/", form=form, headers={"X-CSRFToken": browser.csrf()})
            answers["playground start"] = status
            queued = json.loads(text)["run_id"] if status == 202 else run_id
            answers["playground cancel"] = browser.call(
                "POST", f"/playground/runs/{queued}/cancel/", form={}, headers={"X-CSRFToken": browser.csrf()}
            )[0]
        # Nothing was missing, and check --deploy (debug off) says so.
        deploy = subprocess.run(
            [sys.executable, str(ROOT / "manage.py"), "check", "--deploy"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
    # cancels: 200 for a run still queued, 202 for one executing
    assert answers == {
        "create": 202,
        "create sync": 201,
        "cancel": answers["cancel"] if answers["cancel"] in (200, 202) else "200 or 202",
        "bulk cancel": 200,
        "fork": 202,
        "playground start": 202,
        "playground cancel": answers["playground cancel"] if answers["playground cancel"] in (200, 202) else "2xx",
    }
    assert "nrllm_agents.E01" not in deploy.stdout + deploy.stderr, deploy.stdout + deploy.stderr


@pytest.mark.parametrize("fmt", ["json", "text"])
def test_a_500_with_debug_off_logs_its_traceback_to_stderr(tmp_path, fmt):
    with fresh_database(tmp_path) as url:
        env = production_env(url, DJANGO_SETTINGS_MODULE="tests.e2e.failing_settings", NRLLM_LOG_FORMAT=fmt)
        manage(env, "migrate", "--noinput", "-v0")
        with serve("gunicorn", env, tmp_path) as base:
            status, body = Http(base).call("GET", "/boom/")
        log = next(tmp_path.glob("gunicorn-*.log")).read_text()
    assert status == 500 and "boom" not in body  # the client sees no traceback ...
    assert "RuntimeError: boom: a view failed on purpose" in log  # ... the operator does
    if fmt == "json":
        lines = [json.loads(line) for line in log.splitlines() if line.startswith("{")]
        [error] = [x for x in lines if x.get("logger") == "django.request"]
        assert error["level"] == "ERROR" and "/boom/" in error["message"]
        assert "RuntimeError: boom" in error["exc_info"]
