"""Plain value types shared by the tool loop, providers and tools (no Django)."""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any


class StepKind(enum.StrEnum):
    """What one recorded step is."""

    REQUEST = "request"  # what is sent to the model, recorded before the call
    LLM = "llm"  # the model's answer
    TOOL = "tool"  # one tool execution
    APPROVAL = "approval"  # a human decision on gated calls
    CANCELLED = "cancelled"  # the acknowledgement of a cancel
    FORKED = "forked"  # the first step of a fork: the transcript copied from its parent (repaired)
    THREAD = "thread"  # the first step of a thread's run: the thread's transcript and the new message


class LoopOutcome(enum.StrEnum):
    """How one drive of the tool loop ended."""

    COMPLETED = "completed"  # the model answered without calling a tool
    MAX_ITERATIONS = "max_iterations"  # the iteration cap was reached
    AWAITING_APPROVAL = "awaiting_approval"  # a turn holds a gated call; state is resumable
    AWAITING_CHILDREN = "awaiting_children"  # a turn calls sub-agents whose runs have not ended
    PROVIDER_FAILED = "provider_failed"  # the model call raised
    TOOL_FAILED = "tool_failed"  # a tool raised unexpectedly
    APPROVAL_DENIED = "approval_denied"  # a denial ended the run (on_deny="stop")


@dataclass(frozen=True)
class Usage:
    """Token spend, and its cost once priced; adds up across model calls.

    ``cost`` is money at the price in force when each call ran (``None`` while no call was
    priced), a ``Decimal``, never a float; ``cost_estimated`` says that part of it was priced
    from estimated tokens (a call cut short before the server reported its usage).
    """

    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost: Decimal | None = None
    cost_estimated: bool = False

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def __add__(self, other: Usage) -> Usage:
        cost = None if self.cost is None and other.cost is None else (self.cost or 0) + (other.cost or 0)
        return Usage(
            self.prompt_tokens + other.prompt_tokens,
            self.completion_tokens + other.completion_tokens,
            cost if cost is None else Decimal(cost),
            self.cost_estimated or other.cost_estimated,
        )

    def as_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.total_tokens,
        }
        if self.cost is not None:
            data["cost"] = decimal_text(self.cost)
            if self.cost_estimated:
                data["cost_estimated"] = True
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> Usage:
        data = data or {}
        cost = data.get("cost")
        try:
            parsed = Decimal(str(cost)) if cost not in (None, "") else None
        except InvalidOperation:
            parsed = None
        if parsed is not None and not parsed.is_finite():
            parsed = None
        return cls(
            int(data.get("prompt_tokens") or 0),
            int(data.get("completion_tokens") or 0),
            parsed,
            bool(data.get("cost_estimated")) and parsed is not None,
        )


def decimal_text(value: Decimal) -> str:
    """A decimal as plain text, without trailing zeros and never in exponent form
    (``0.0000001``, not ``1E-7`` or ``0.000000100``)."""
    return format(value.normalize(), "f")


@dataclass(frozen=True)
class ToolCall:
    """One call the model asked for."""

    id: str
    name: str
    arguments: dict[str, Any]

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "arguments": self.arguments}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ToolCall:
        return cls(str(data["id"]), str(data["name"]), dict(data.get("arguments") or {}))


@dataclass(frozen=True)
class ModelResponse:
    """What a provider returns for one call."""

    content: str | None
    tool_calls: tuple[ToolCall, ...] = ()
    usage: Usage = Usage()
    finish_reason: str = "stop"
    # the model that answered, when the server says (it may differ from the one asked); metadata, not compared
    model: str | None = field(default=None, compare=False)


@dataclass(frozen=True)
class Step:
    """One recorded unit of work, as handed to the trace hook."""

    kind: StepKind
    round: int
    payload: dict[str, Any]
    duration_ms: float | None = None


Trace = Callable[[Step], None]
"""The one hook the runtime hands the loop; it may raise to stop the loop at this boundary."""


@dataclass
class LoopState:
    """Everything needed to resume a suspended loop; JSON-serialisable via as_dict()."""

    messages: list[dict[str, Any]]
    pending_calls: list[ToolCall] = field(default_factory=list)
    round: int = 0
    iterations: int = 0
    usage: Usage = Usage()
    sent: int = 0  # how many messages earlier request steps already recorded
    decision: bool | None = None  # a human decision already recorded for pending_calls (rebuilt states)
    # The pending call a lost worker may or may not have made (``{"call": ..., "at": ...}``): the
    # run waits for a person to say whether it happened (``ToolLoop.resume``'s ``in_doubt``).
    in_doubt: dict[str, Any] | None = None

    def as_dict(self) -> dict[str, Any]:
        data = {
            "messages": self.messages,
            "pending_calls": [c.as_dict() for c in self.pending_calls],
            "round": self.round,
            "iterations": self.iterations,
            "usage": self.usage.as_dict(),
            "sent": self.sent,
        }
        if self.in_doubt is not None:
            data["in_doubt"] = self.in_doubt
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LoopState:
        return cls(
            messages=list(data["messages"]),
            pending_calls=[ToolCall.from_dict(c) for c in data.get("pending_calls", [])],
            round=int(data.get("round", 0)),
            iterations=int(data.get("iterations", 0)),
            usage=Usage.from_dict(data.get("usage")),
            sent=int(data.get("sent", 0)),
            in_doubt=data.get("in_doubt") if isinstance(data.get("in_doubt"), dict) else None,
        )


@dataclass(frozen=True)
class LoopResult:
    """How a drive of the loop ended, with what it produced."""

    outcome: LoopOutcome
    state: LoopState
    final_text: str | None = None
    error: BaseException | None = None

    @property
    def usage(self) -> Usage:
        return self.state.usage

    @property
    def iterations(self) -> int:
        return self.state.iterations
