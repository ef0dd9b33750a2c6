"""``manage.py agent_cancel`` imports what a cancel uses, not the web's rooms (issue 46).

Its system checks leave out the web's (``console.checks_without_web``): checking the URLconf
imports the REST API and its schema views, and the template, admin and DRF checks import DRF's
renderers and serializers, none of which a cancel uses. ``redis.asyncio`` is not asserted:
``django_rq``, an installed app, imports ``redis``, whose ``__init__`` imports it.
"""

from __future__ import annotations

import subprocess
import sys
import uuid

import pytest

from tests.conftest import ROOT

pytestmark = [pytest.mark.processes, pytest.mark.django_db(transaction=True)]

WEB_ONLY = ("drf_spectacular.views", "rest_framework.serializers", "nrllm_agents.api.views", "config.urls")


def imported(stderr: str) -> set[str]:
    """The modules a ``python -X importtime`` process imported, by name."""
    return {line.rsplit("|", 1)[1].strip() for line in stderr.splitlines() if line.startswith("import time:")}


def test_agent_cancel_imports_no_web_room(child_env):
    missing = str(uuid.uuid4())
    ran = subprocess.run(
        [sys.executable, "-X", "importtime", str(ROOT / "manage.py"), "agent_cancel", missing],
        env=child_env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ran.returncode == 1 and f"Run {missing} does not exist" in ran.stdout, ran.stdout + ran.stderr[-2000:]
    modules = imported(ran.stderr)
    assert "nrllm_agents.runtime.agent_runtime" in modules  # the measure sees the command's own imports
    assert not modules & set(WEB_ONLY)


def test_agent_cancel_still_runs_this_apps_checks(child_env):
    ran = subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), "agent_cancel", str(uuid.uuid4())],
        env={**child_env, "NRLLM_JOB_TIMEOUT": "soon"},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ran.returncode == 1 and "nrllm_agents.E002" in ran.stderr, ran.stdout + ran.stderr
