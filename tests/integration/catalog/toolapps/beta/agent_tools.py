"""A second app whose tool has the name of one of alpha's."""

from __future__ import annotations

from nrllm_agents import tool

from ..alpha.agent_tools import shout as imported_shout  # the same object: not a clash  # noqa: F401


@tool(name="shout")
def whisper(text: str) -> str:
    """Say it softly."""
    return text.lower()
