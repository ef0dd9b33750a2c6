"""What a model provider is written against: the protocol it satisfies, the types it returns
and the exceptions it raises, and the built-in providers a host names in
``NRLLM_AGENTS["PROVIDERS"]`` (docs/howto/extend.md).

A public module in front of private ones, as Temporal's sdk-python puts ``temporalio.worker``
in front of ``_worker.py``: the types are defined in ``domain/`` and the factories in
``catalog/registry.py``, re-exported here, and the old paths keep working. The types import no
Django; the factories read the settings, so they are imported on first use (PEP 562) and a
provider module may import this one at the top.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .domain.cancel import CallContext, CancelToken, StepInterrupted
from .domain.errors import ProviderError
from .domain.exports import on_first_use
from .domain.providers.base import Provider
from .domain.providers.scripted import ScriptedProvider
from .domain.steps import ModelResponse, ToolCall, Usage

# the built-in providers' factories ``(request, run_id) -> Provider``, defined in the registry
_FACTORIES = ("anthropic_provider", "connection_provider", "gemini_provider", "openai_provider", "scripted_provider")

__all__ = [
    "CallContext",
    "CancelToken",
    "ModelResponse",
    "Provider",
    "ProviderError",
    "ScriptedProvider",
    "StepInterrupted",
    "ToolCall",
    "Usage",
    "anthropic_provider",
    "connection_provider",
    "gemini_provider",
    "openai_provider",
    "scripted_provider",
]

if TYPE_CHECKING:
    from .catalog.registry import (
        anthropic_provider,
        connection_provider,
        gemini_provider,
        openai_provider,
        scripted_provider,
    )


__getattr__ = on_first_use(globals(), dict.fromkeys(_FACTORIES, "nrllm_agents.catalog.registry"))
