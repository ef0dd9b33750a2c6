"""``manage.py check`` in a process of its own: a bad setting stops the start and names the value."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.processes  # every test here starts a Python process


def manage_py_check(**env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), "check"],
        env={"PATH": "/usr/bin:/bin", "DJANGO_DEBUG": "1", "DATABASE_URL": "sqlite:///:memory:", **env},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_manage_py_check_refuses_to_start_and_names_the_value():
    ran = manage_py_check(NRLLM_JOB_TIMEOUT="soon")
    assert ran.returncode == 1, ran.stdout + ran.stderr
    assert "NRLLM_JOB_TIMEOUT='soon'" in ran.stderr and "nrllm_agents.E002" in ran.stderr


def test_manage_py_check_names_an_unknown_executor():
    ran = manage_py_check(NRLLM_EXECUTOR="threads")
    assert ran.returncode == 1, ran.stdout + ran.stderr
    assert (
        "NRLLM_AGENTS['EXECUTOR'] must be 'auto', 'rq', 'local' or the dotted path of an Executor class, not 'threads'"
        in ran.stderr
    )
    assert "nrllm_agents.E003" in ran.stderr
    ran = manage_py_check(NRLLM_EXECUTOR="rq")  # no REDIS_URL in this environment
    assert ran.returncode == 1 and "nrllm_agents.E009" in ran.stderr, ran.stdout + ran.stderr
