"""What a run is built from, the catalog: connections (with their keys), saved agents, and the registry that
builds a run's provider and tools from settings, connections and MCP servers.

Public: the factories of the built-in providers and tools, the dotted paths a host writes in
``NRLLM_AGENTS["PROVIDERS"]`` and ``["TOOLS"]`` (``nrllm_agents.catalog.scripted_provider``...),
re-exported from the private ``registry`` (whose paths keep working). Imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

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


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from . import registry

    return getattr(registry, name)
