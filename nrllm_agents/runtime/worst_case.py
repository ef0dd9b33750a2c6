"""What a model call may cost at most: the reservation a budget must have room for, per call
and, at admission, for a run's (or a sub-agent run's) first call."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any

from ..catalog import registry
from ..domain import Price, Usage
from ..domain.providers.wire import estimate_usage
from ..money import pricing
from ..validation.run_request import RunRequest

__all__ = ["first_call", "worst_case"]


def worst_case(messages: Sequence[Mapping[str, Any]], max_tokens: int, price: Price | None) -> tuple[Decimal, int]:
    """What a call may cost at most, ``(cost, tokens)``: the estimate of ``messages`` and
    ``max_tokens`` answer tokens, at ``price``."""
    prompt = estimate_usage(list(messages), 0).prompt_tokens  # type: ignore[arg-type]
    usage = Usage(prompt, max_tokens)
    return (price.cost(usage) if price is not None else Decimal(0)), usage.total_tokens


def first_call(request: RunRequest) -> tuple[Decimal, int]:
    """The worst case of a run's first model call, for its admission: its prompt (and system
    prompt) as the loop sends them, and the ``max_tokens`` of its provider, at the price in force."""
    messages = [{"role": "system", "content": request.system}] if request.system else []
    messages.append({"role": "user", "content": request.prompt})
    return worst_case(messages, registry.request_max_tokens(request), pricing.for_request(request))
