"""Queued jobs name ``nrllm_agents.jobs.execute_run``: that path resolves in a fresh worker process."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.processes  # every test here starts a Python process


def test_the_job_name_imports_in_a_fresh_interpreter_before_anything_else():
    """The first import a process makes may be the job's name (an RQ worker resolving a job)."""
    code = (
        "import django, os; os.environ.setdefault('DJANGO_SETTINGS_MODULE', 'config.test_settings'); django.setup();"
        "from rq.utils import import_attribute;"
        "f = import_attribute('nrllm_agents.jobs.execute_run');"
        "import nrllm_agents.workers.jobs as j; assert f is j.execute_run; print('ok')"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
