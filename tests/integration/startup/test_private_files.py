"""Issue 32 finding 9: the files that hold secrets are their owner's only.

Guards: ``make run``'s ``db.sqlite3`` (API tokens, session keys) was created 0644 under the
usual umask 022, readable by every user of the machine. Each case starts a fresh process with
that umask.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.processes  # every test here starts a Python process

KEY = "k" * 10 + "0123456789abcdefghijklmnopqrstuvwxyz!@#$%^&*(-_=+)"


def run(args: list[str], **env: str) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "PYTEST", "NRLLM_SECRET_KEYS"))}
    base.update({"DJANGO_SETTINGS_MODULE": "config.settings", "DJANGO_SECRET_KEY": KEY, "DJANGO_DEBUG": "1", **env})
    return subprocess.run(
        [sys.executable, *args],
        cwd=ROOT,
        env=base,
        capture_output=True,
        text=True,
        timeout=180,
        preexec_fn=lambda: os.umask(0o022),
    )


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_migrate_creates_the_sqlite_database_and_its_wal_private(tmp_path):
    database = tmp_path / "db.sqlite3"
    done = run(["manage.py", "migrate", "-v0"], DATABASE_URL=f"sqlite:///{database}")
    assert done.returncode == 0, done.stderr
    made = sorted(p.name for p in tmp_path.iterdir())
    assert "db.sqlite3" in made
    for path in tmp_path.iterdir():  # the database, and its -wal and -shm while they exist
        assert mode(path) == 0o600, (path.name, oct(mode(path)))


def test_an_existing_world_readable_sqlite_database_is_made_private(tmp_path):
    database = tmp_path / "db.sqlite3"
    database.touch()
    database.chmod(0o644)
    assert run(["manage.py", "migrate", "-v0"], DATABASE_URL=f"sqlite:///{database}").returncode == 0
    assert mode(database) == 0o600


def test_the_development_secret_key_is_created_private(tmp_path):
    key = tmp_path / ".dev-secret-key"
    probe = (
        "from pathlib import Path; from config.settings import _dev_secret_key; "
        f"print(len(_dev_secret_key(Path({str(key)!r}))))"
    )
    done = run(["-c", probe], DATABASE_URL="sqlite:///:memory:")
    assert done.returncode == 0 and int(done.stdout) >= 50, done.stderr
    assert mode(key) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == [".dev-secret-key"]  # no staged copy left behind
