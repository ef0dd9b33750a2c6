"""nrllm_agents: durable, auditable LLM tool-calling agent runs with cooperative cancellation.

Import the runtime from ``nrllm_agents.runtime`` (it needs Django set up); the database-free core
lives in ``nrllm_agents.domain``. ``ARCHITECTURE.md`` names the floors, one folder each.

Modules that moved to their floor's folder keep their old dotted path, because such paths are
stored outside the code: a queued RQ job names ``nrllm_agents.jobs.execute_run``, and settings
name worker classes, middleware and tool and provider factories. An old path imports the very
module object of the new one (so ``isinstance`` and patching agree) and warns once.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings
from types import ModuleType

# old dotted path -> where the module lives now
MOVED = {
    "nrllm_agents.agents": "nrllm_agents.catalog.agents",
    "nrllm_agents.connections": "nrllm_agents.catalog.connections",
    "nrllm_agents.registry": "nrllm_agents.catalog.registry",
    "nrllm_agents.tools": "nrllm_agents.catalog.tools",
    "nrllm_agents.vault": "nrllm_agents.crypto.vault",
    "nrllm_agents.db": "nrllm_agents.store.db",
    "nrllm_agents.retries": "nrllm_agents.store.retries",
    "nrllm_agents.inflight": "nrllm_agents.executors.inflight",
    "nrllm_agents.jsonlimits": "nrllm_agents.domain.jsonlimits",
    "nrllm_agents.dispatch": "nrllm_agents.executors.dispatch",
    "nrllm_agents.recovery": "nrllm_agents.executors.recovery",
    "nrllm_agents.describe": "nrllm_agents.presentation.describe",
    "nrllm_agents.outcomes": "nrllm_agents.presentation.outcomes",
    "nrllm_agents.policy": "nrllm_agents.access.policy",
    "nrllm_agents.presenters": "nrllm_agents.presentation.presenters",
    "nrllm_agents.run_request": "nrllm_agents.validation.run_request",
    "nrllm_agents.pricing": "nrllm_agents.money.pricing",
    "nrllm_agents.observability.money": "nrllm_agents.money.amounts",
    "nrllm_agents.interrupts": "nrllm_agents.live.interrupts",
    "nrllm_agents.push": "nrllm_agents.live.push",
    "nrllm_agents.watch": "nrllm_agents.live.watch",
    "nrllm_agents.deltas": "nrllm_agents.live.deltas",
    "nrllm_agents.segment": "nrllm_agents.runtime.segment",
    "nrllm_agents.forks": "nrllm_agents.runtime.forks",
    "nrllm_agents.limits": "nrllm_agents.runtime.limits",
    "nrllm_agents.runtime.budgets": "nrllm_agents.runtime.limits",
    "nrllm_agents.threads": "nrllm_agents.runtime.threads",
    "nrllm_agents.jobs": "nrllm_agents.workers.jobs",
    "nrllm_agents.worker": "nrllm_agents.workers.rq_worker",
    "nrllm_agents.threaded": "nrllm_agents.workers.threaded",
    "nrllm_agents.maintenance": "nrllm_agents.workers.maintenance",
    "nrllm_agents.outages": "nrllm_agents.workers.outages",
    "nrllm_agents.warm": "nrllm_agents.workers.warm",
    "nrllm_agents.middleware": "nrllm_agents.http.edge",
    "nrllm_agents.web.stream": "nrllm_agents.api.stream",
}


# Old paths that are a contract, not a leftover: they answer without a warning.
STABLE = {"nrllm_agents.jobs"}  # the name of the job on the queue (``executors.rq_queue.JOB_FUNCTION``)


class _MovedLoader(importlib.abc.Loader):
    """Answers an old path with the module at its new one (imported on first use, not before)."""

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        if spec.name not in STABLE:
            warnings.warn(
                f"{spec.name} moved to {MOVED[spec.name]}; the old path keeps working",
                DeprecationWarning,
                stacklevel=2,
            )
        module = importlib.import_module(MOVED[spec.name])
        self.spec = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        """Nothing to run (the module ran under its new name); give back the spec the import
        machinery just overwrote with the old path's, so the module still names where it lives."""
        module.__spec__ = self.spec


class _MovedFinder(importlib.abc.MetaPathFinder):
    def find_spec(
        self, fullname: str, path: object = None, target: object = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in MOVED:
            return None
        return importlib.machinery.ModuleSpec(fullname, _MovedLoader())


if not any(isinstance(finder, _MovedFinder) for finder in sys.meta_path):
    sys.meta_path.insert(0, _MovedFinder())
