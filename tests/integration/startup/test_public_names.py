"""One public surface: ``nrllm_agents.__all__``, listed in the docs; the moved-paths shim is gone
but for the job's name on the queue."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys

import pytest

import nrllm_agents
from tests.conftest import ROOT

DOC = ROOT / "docs" / "reference" / "python-api.md"


@pytest.mark.processes
def test_importing_the_package_loads_nothing_else_of_it() -> None:
    """Settings name the app before Django is set up: the public names load on first use."""
    code = "import sys, nrllm_agents; print(sorted(m for m in sys.modules if m.startswith('nrllm')))"
    loaded = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert loaded.stdout.strip() == "['nrllm_agents']", loaded.stderr


@pytest.mark.processes
def test_a_provider_or_tool_module_may_import_the_public_types_before_django_is_set_up() -> None:
    """``nrllm_agents.providers`` and ``nrllm_agents.tools`` load no Django, no registry and no
    RQ: their built-in factories are imported on first use."""
    code = (
        "import sys, nrllm_agents.providers, nrllm_agents.tools\n"
        "print(sorted(m for m in sys.modules if m.startswith(('django', 'rq', 'nrllm_agents.catalog'))))"
    )
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    loaded = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60, env=env)
    assert loaded.stdout.strip() == "[]", loaded.stderr


def test_every_public_name_resolves_and_is_documented() -> None:
    assert nrllm_agents.__all__ == sorted([*nrllm_agents._PUBLIC, "__version__"])
    page = DOC.read_text()
    for name in nrllm_agents.__all__:
        assert getattr(nrllm_agents, name) is not None
        assert f"`{name}`" in page, f"{name} is public but docs/reference/python-api.md does not list it"
    with pytest.raises(AttributeError):
        nrllm_agents.AgentRuntime  # noqa: B018 (private: not a public name)


# ``nrllm_agents.middleware`` is public again: the module in front of ``http/`` that hosts write
# (tests/unit/test_public_paths.py)
@pytest.mark.parametrize("old", ["nrllm_agents.registry", "nrllm_agents.worker"])
def test_moved_paths_are_gone(old: str) -> None:
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(old)


def test_the_job_name_on_the_queue_stays() -> None:
    from nrllm_agents.executors.rq_queue import JOB_FUNCTION
    from nrllm_agents.workers.jobs import execute_run

    module, name = JOB_FUNCTION.rsplit(".", 1)
    assert getattr(importlib.import_module(module), name) is execute_run
