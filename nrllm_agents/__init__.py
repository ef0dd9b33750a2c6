"""nrllm_agents: durable, auditable LLM tool-calling agent runs with a cancel that interrupts the
call in flight, as a Django app.

The public names are the ones below (``__all__``, listed in docs/reference/python-api.md); every
other module is private to the app, whatever its name, and may change in any release. They are
imported on first use, so ``import nrllm_agents`` needs no configured Django (settings and
``INSTALLED_APPS`` read it before ``django.setup()``).
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

__version__ = "0.6.0"

# public name -> the module that defines it
_PUBLIC = {
    # tools
    "tool": "nrllm_agents.domain.tools.typed",
    "FunctionTool": "nrllm_agents.domain.tools.typed",
    "Tool": "nrllm_agents.domain.tools.base",
    "ToolError": "nrllm_agents.domain.errors",
    "CallContext": "nrllm_agents.domain.cancel",
    # runs from host code
    "run": "nrllm_agents.runtime.public",
    "enqueue": "nrllm_agents.runtime.public",
    "cancel": "nrllm_agents.runtime.public",
    "create_thread": "nrllm_agents.runtime.public",
    "post": "nrllm_agents.runtime.public",
    "status": "nrllm_agents.runtime.public",
    "steps": "nrllm_agents.runtime.public",
    "RunResult": "nrllm_agents.presentation.outcomes",
    "CancelResult": "nrllm_agents.presentation.outcomes",
    "Outcome": "nrllm_agents.presentation.outcomes",
    "CancelOutcome": "nrllm_agents.presentation.outcomes",
    "InvalidRequest": "nrllm_agents.validation.run_request",
    "RunRequest": "nrllm_agents.validation.run_request",
    "RunNotFound": "nrllm_agents.presentation.outcomes",
    "ThreadNotFound": "nrllm_agents.runtime.threads",
    "ThreadBusy": "nrllm_agents.runtime.threads",
    # signals
    "run_settled": "nrllm_agents.runtime.signals",
    "step_recorded": "nrllm_agents.runtime.signals",
}

# the public names: the ones of _PUBLIC, and the version
__all__ = [
    "CallContext",
    "CancelOutcome",
    "CancelResult",
    "FunctionTool",
    "InvalidRequest",
    "Outcome",
    "RunNotFound",
    "RunRequest",
    "RunResult",
    "ThreadBusy",
    "ThreadNotFound",
    "Tool",
    "ToolError",
    "__version__",
    "cancel",
    "create_thread",
    "enqueue",
    "post",
    "run",
    "run_settled",
    "status",
    "step_recorded",
    "steps",
    "tool",
]

if TYPE_CHECKING:
    from .domain.cancel import CallContext
    from .domain.errors import ToolError
    from .domain.tools.base import Tool
    from .domain.tools.typed import FunctionTool, tool
    from .presentation.outcomes import CancelOutcome, CancelResult, Outcome, RunNotFound, RunResult
    from .runtime.public import cancel, create_thread, enqueue, post, run, status, steps
    from .runtime.signals import run_settled, step_recorded
    from .runtime.threads import ThreadBusy, ThreadNotFound
    from .validation.run_request import InvalidRequest, RunRequest


def __getattr__(name: str) -> Any:
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'nrllm_agents' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value  # once: later lookups find it without this hook
    return value


def __dir__() -> list[str]:
    return __all__
