"""What a run is built from, the catalog: connections (with their keys), saved agents, and the registry that
builds a run's provider and tools from settings, connections and MCP servers.

Private, as every room is. The built-in factories a host writes in ``NRLLM_AGENTS["PROVIDERS"]``
and ``["TOOLS"]`` are public in ``nrllm_agents.providers`` and ``nrllm_agents.tools``; their
older paths, ``nrllm_agents.catalog.registry.<factory>`` and ``nrllm_agents.catalog.<factory>``
(re-exported here on first use), keep working.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..domain.exports import on_first_use

__all__ = [
    "anthropic_provider",
    "calculator_tool",
    "connection_provider",
    "current_time_tool",
    "gemini_provider",
    "openai_provider",
    "scripted_provider",
    "sleep_tool",
]

if TYPE_CHECKING:
    from .registry import (
        anthropic_provider,
        calculator_tool,
        connection_provider,
        current_time_tool,
        gemini_provider,
        openai_provider,
        scripted_provider,
        sleep_tool,
    )


__getattr__ = on_first_use(globals(), dict.fromkeys(__all__, ".registry"))
