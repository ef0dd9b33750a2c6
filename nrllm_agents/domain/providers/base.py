"""The model provider protocol."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from ..steps import ModelResponse


@runtime_checkable
class Provider(Protocol):
    """Answers one chat turn: messages and tool schemas in, a ``ModelResponse`` out.

    Raises ``ProviderError`` when the model server cannot answer. A provider may also take a
    keyword ``context`` (``CallContext``): the loop then hands it the run's cancel token and a
    sink for the answer's text as it streams (see ``domain/cancel.py``).
    """

    name: str
    model: str
    # Optional ``instant: bool`` (default False), as for tools (``tools/base.py``): a provider
    # whose calls wait on nothing (no network, no clock: the scripted one with no delays) sets
    # it True, and the runtime keeps its database connection across the call. Every provider
    # that talks to a model server waits, and leaves it unset.

    def complete(self, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]]) -> ModelResponse: ...
