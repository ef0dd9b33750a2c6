"""Issue 9 finding 1: production-safe by default.

Guards: debug was on unless DJANGO_DEBUG=0, and without DJANGO_SECRET_KEY the settings fell
back without a word to a constant committed in the repository (which ``check --deploy`` did
not flag). Each case starts a fresh process with exactly the environment under test.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.processes  # every test here starts a Python process

KEY = "k" * 10 + "0123456789abcdefghijklmnopqrstuvwxyz!@#$%^&*(-_=+)"  # 60 chars, varied
PRODUCTION = {
    "DJANGO_SECRET_KEY": KEY,
    "DJANGO_ALLOWED_HOSTS": "agents.example.com",
    "DJANGO_SECURE_SSL_REDIRECT": "1",
    "DJANGO_SECURE_HSTS_SECONDS": "31536000",
    "DJANGO_SECURE_HSTS_INCLUDE_SUBDOMAINS": "1",
    "DJANGO_SECURE_HSTS_PRELOAD": "1",
    "DJANGO_SECURE_COOKIES": "1",
    "NRLLM_SECRET_KEYS": "cHJvZHVjdGlvbi10ZXN0LWZlcm5ldC1rZXktMzJieXQ=",  # encrypts connections' keys
}


def run(args: list[str], **env: str) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "PYTEST", "NRLLM_SECRET_KEYS"))}
    base.update({"DJANGO_SETTINGS_MODULE": "config.settings", "DATABASE_URL": "sqlite:///:memory:", **env})
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=base, capture_output=True, text=True, timeout=120)


def checkout_manage_py(tmp_path, env_file: str | None) -> str:
    """This repository's manage.py in a folder of its own (``.env`` beside it: ``env_file``)."""
    shutil.copy(ROOT / "manage.py", tmp_path / "manage.py")
    if env_file is not None:
        (tmp_path / ".env").write_text(env_file)
    return str(tmp_path / "manage.py")


def makefile_env_file(tmp_path) -> str:
    """The ``.env`` that ``make venv`` writes, by its own line of the Makefile."""
    (line,) = [x for x in (ROOT / "Makefile").read_text().splitlines() if ">.env" in x]
    subprocess.run(["bash", "-c", line.strip().lstrip("@")], cwd=tmp_path, check=True)
    return (tmp_path / ".env").read_text()


def test_without_a_secret_key_and_without_debug_the_process_refuses_to_start(tmp_path):
    """A deploy: no ``.env`` beside manage.py, no key in the environment."""
    done = run([checkout_manage_py(tmp_path, None), "check"], PYTHONPATH=str(ROOT))
    assert done.returncode != 0
    assert done.stderr.startswith("manage.py: DJANGO_SECRET_KEY is not set.")
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr  # one line, no traceback


def test_manage_py_runs_in_development_mode_by_the_env_file_make_writes(tmp_path):
    """Issue 48 item 4: ``.venv/bin/python manage.py ...`` outside ``make`` (as the docs write it)
    reads the ``.env`` that ``make venv`` wrote; the environment still wins, and a key in it
    (a deploy) leaves the file unread."""
    manage = checkout_manage_py(tmp_path, makefile_env_file(tmp_path))
    probe = ["shell", "-c", "from django.conf import settings; print(settings.DEBUG)"]
    done = run([manage, *probe], PYTHONPATH=str(ROOT))
    assert (done.returncode, done.stdout.split()[-1]) == (0, "True"), done.stderr
    refused = run([manage, "check"], PYTHONPATH=str(ROOT), DJANGO_DEBUG="0")
    assert refused.returncode != 0 and refused.stderr.startswith("manage.py: DJANGO_SECRET_KEY is not set.")
    deployed = run([manage, *probe], PYTHONPATH=str(ROOT), DJANGO_SECRET_KEY=KEY)
    assert (deployed.returncode, deployed.stdout.split()[-1]) == (0, "False"), deployed.stderr


def test_a_variable_that_is_not_a_boolean_is_named_not_read_as_false():
    """One parser for the environment (conf.env): settings read ``DJANGO_SECURE_COOKIES=ture`` as
    False before, silently; now it is refused, in one line naming the variable."""
    done = run(["manage.py", "check"], DJANGO_DEBUG="1", DJANGO_SECURE_COOKIES="ture")
    assert done.returncode != 0
    assert done.stderr == "manage.py: environment variable DJANGO_SECURE_COOKIES='ture' is not a valid bool\n"


def test_debug_is_off_unless_asked_for():
    probe = "import django; django.setup(); from django.conf import settings; print(settings.DEBUG)"
    assert run(["-c", probe], DJANGO_SECRET_KEY=KEY).stdout.strip() == "False"
    assert run(["-c", probe], DJANGO_SECRET_KEY=KEY, DJANGO_DEBUG="1").stdout.strip() == "True"


def test_check_deploy_is_clean_with_the_documented_production_settings(tmp_path):
    database = {"DATABASE_URL": f"sqlite:///{tmp_path / 'deploy.sqlite3'}"}
    assert run(["manage.py", "migrate", "-v0"], **PRODUCTION, **database).returncode == 0
    done = run(["manage.py", "check", "--deploy", "--fail-level", "WARNING"], **PRODUCTION, **database)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "no issues" in done.stdout


def test_check_deploy_names_a_migrate_that_did_not_run(tmp_path):
    """Issue 20 item 10: ``check --deploy`` was silent about what a deploy had not created."""
    database = {"DATABASE_URL": f"sqlite:///{tmp_path / 'fresh.sqlite3'}"}
    done = run(["manage.py", "check", "--deploy"], **PRODUCTION, **database)
    assert done.returncode != 0
    assert "nrllm_agents.E010" in done.stderr and "Run `python manage.py migrate`" in done.stderr


def test_check_refuses_production_without_a_key_for_connections():
    settings = {k: v for k, v in PRODUCTION.items() if k != "NRLLM_SECRET_KEYS"}
    done = run(["manage.py", "check", "--deploy"], **settings)
    assert done.returncode != 0
    assert "nrllm_agents.E014" in done.stderr and "NRLLM_SECRET_KEYS" in done.stderr


def test_processes_starting_together_in_development_read_one_whole_key(tmp_path):
    """The development key is created by whichever process comes first (the two halves of
    ``make test``, runserver and its reloader); none may read it empty or half written."""
    import threading

    from config.settings import _dev_secret_key

    for round_ in range(50):
        path = tmp_path / f"key-{round_}"
        start, keys = threading.Barrier(8), []

        def read(path=path, start=start, keys=keys) -> None:
            start.wait()
            keys.append(_dev_secret_key(path))

        threads = [threading.Thread(target=read) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(set(keys)) == 1 and len(keys[0]) >= 50, keys
        assert path.read_text() == keys[0] and oct(path.stat().st_mode & 0o777) == "0o600"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(f"key-{i}" for i in range(50))  # no staged file left
