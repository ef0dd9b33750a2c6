"""What a tool is written against, and the built-in tools a host names in
``NRLLM_AGENTS["TOOLS"]`` (docs/howto/extend.md).

A public module in front of private ones, as Temporal's sdk-python puts ``temporalio.worker`` in
front of ``_worker.py``: the types are defined in ``domain/`` and the factories in
``catalog/registry.py`` (``WriteNote`` in ``catalog/tools.py``), whose paths keep working. The
types import no Django; the factories read the settings, so they are imported on first use
(PEP 562) and a tool module may import this one at the top.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .domain.cancel import CallContext, CancelToken, StepInterrupted
from .domain.errors import ToolError
from .domain.exports import on_first_use
from .domain.tools.base import Tool
from .domain.tools.typed import FunctionTool, tool

# the built-in tools, by the public name a host writes -> the private module that defines it
_FACTORIES = {
    "calculator_tool": "nrllm_agents.catalog.registry",
    "current_time_tool": "nrllm_agents.catalog.registry",
    "sleep_tool": "nrllm_agents.catalog.registry",
    "WriteNote": "nrllm_agents.catalog.tools",
}

__all__ = [
    "CallContext",
    "CancelToken",
    "FunctionTool",
    "StepInterrupted",
    "Tool",
    "ToolError",
    "WriteNote",
    "calculator_tool",
    "current_time_tool",
    "sleep_tool",
    "tool",
]

if TYPE_CHECKING:
    from .catalog.registry import calculator_tool, current_time_tool, sleep_tool
    from .catalog.tools import WriteNote


__getattr__ = on_first_use(globals(), _FACTORIES)
