"""Model providers: the protocol, the offline scripted one, and the OpenAI-compatible one.

``OpenAIProvider`` is imported on first use: the ``openai`` SDK costs about a second of
start-up, which every management command (``agent_cancel`` included) would otherwise pay.
"""

from __future__ import annotations

from typing import Any

from .base import Provider
from .scripted import DEMO_SCRIPT, ScriptedProvider, validate_script

__all__ = ["DEMO_SCRIPT", "OpenAIProvider", "Provider", "ScriptedProvider", "validate_script"]


def __getattr__(name: str) -> Any:
    if name == "OpenAIProvider":
        from .openai_compat import OpenAIProvider

        return OpenAIProvider
    raise AttributeError(name)
