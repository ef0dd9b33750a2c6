"""Old dotted paths still import: the modules moved to their floors' folders, the paths did not.

A path stored outside the code (a queued job, a settings value, a user's own import) must keep
naming the same object, not a copy: the old path answers with the module object at the new one.
"""

from __future__ import annotations

import importlib
import sys
import warnings

import pytest
from django.utils.module_loading import import_string

import nrllm_agents
from tests.conftest import ROOT

# Paths that settings and queues hold today (config/settings.py, conf.DEFAULTS before the move,
# RQ jobs), each with the object it must name.
STORED = {
    "nrllm_agents.jobs.execute_run": "nrllm_agents.workers.jobs.execute_run",
    "nrllm_agents.worker.GracefulWorker": "nrllm_agents.workers.rq_worker.GracefulWorker",
    "nrllm_agents.threaded.ThreadedWorker": "nrllm_agents.workers.threaded.ThreadedWorker",
    "nrllm_agents.middleware.EdgeGuardMiddleware": "nrllm_agents.http.edge.EdgeGuardMiddleware",
    "nrllm_agents.registry.scripted_provider": "nrllm_agents.catalog.registry.scripted_provider",
    "nrllm_agents.registry.openai_provider": "nrllm_agents.catalog.registry.openai_provider",
    "nrllm_agents.registry.anthropic_provider": "nrllm_agents.catalog.registry.anthropic_provider",
    "nrllm_agents.registry.gemini_provider": "nrllm_agents.catalog.registry.gemini_provider",
    "nrllm_agents.registry.calculator_tool": "nrllm_agents.catalog.registry.calculator_tool",
    "nrllm_agents.registry.current_time_tool": "nrllm_agents.catalog.registry.current_time_tool",
    "nrllm_agents.registry.sleep_tool": "nrllm_agents.catalog.registry.sleep_tool",
    "nrllm_agents.tools.WriteNote": "nrllm_agents.catalog.tools.WriteNote",
    "nrllm_agents.observability.logs.TextFormatter": "nrllm_agents.observability.logs.TextFormatter",
    "nrllm_agents.runtime.AgentRuntime": "nrllm_agents.runtime.agent_runtime.AgentRuntime",
}


@pytest.mark.parametrize("old", sorted(nrllm_agents.MOVED))
def test_every_old_module_path_is_the_new_module(old):
    new = importlib.import_module(nrllm_agents.MOVED[old])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sys.modules.pop(old, None)
        moved = importlib.import_module(old)
    assert moved is new
    assert moved.__spec__.name == new.__name__  # the module still says where it lives
    if old in nrllm_agents.STABLE:
        assert not caught
    else:
        assert [str(w.message) for w in caught if w.category is DeprecationWarning] == [
            f"{old} moved to {nrllm_agents.MOVED[old]}; the old path keeps working"
        ]


@pytest.mark.parametrize("old, new", sorted(STORED.items()))
def test_every_stored_path_names_the_same_object(old, new):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        assert import_string(old) is import_string(new)


def test_the_queue_names_the_job_by_its_stable_path():
    """Jobs already queued, and workers of the previous release, know the job by this name."""
    from nrllm_agents.executors.rq_queue import JOB_FUNCTION

    assert JOB_FUNCTION == "nrllm_agents.jobs.execute_run"
    assert import_string(JOB_FUNCTION) is import_string("nrllm_agents.workers.jobs.execute_run")


def test_nothing_in_the_package_uses_an_old_path():
    """Old paths are for what is stored outside the code; the code itself names the new ones."""
    olds = [old for old in nrllm_agents.MOVED if old not in nrllm_agents.STABLE]
    found = []
    for path in (ROOT / "nrllm_agents").rglob("*.py"):
        if path.name == "__init__.py" and path.parent.name == "nrllm_agents":
            continue
        text = path.read_text()
        found += [f"{path.relative_to(ROOT)}: {old}" for old in olds if f'"{old}.' in text or f"import {old}" in text]
    assert found == []
