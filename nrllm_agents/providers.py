"""What a model provider is written against: the protocol it satisfies, the types it returns
and the exceptions it raises (docs/howto/extend.md).

A public module in front of private ones, as Temporal's sdk-python puts ``temporalio.worker``
in front of ``_worker.py``: the names are defined in ``domain/`` and re-exported here, and the
old paths keep working. It imports no Django, so a provider module may import it at the top.
"""

from __future__ import annotations

from .domain.cancel import CallContext, CancelToken, StepInterrupted
from .domain.errors import ProviderError
from .domain.providers.base import Provider
from .domain.providers.scripted import ScriptedProvider
from .domain.steps import ModelResponse, ToolCall, Usage

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
]
