"""A host app's typed tools (found by autodiscovery)."""

from __future__ import annotations

from nrllm_agents import tool


@tool
def shout(text: str, times: int = 1) -> str:
    """Say it louder.

    Args:
        text: what to say
    """
    return (text.upper() + "! ") * times


@tool(requires_approval=True)
def calculator(expression: str) -> str:
    """A clash with the built-in tool of NRLLM_AGENTS["TOOLS"]."""
    return expression
