"""The agent domain: tool loop, providers, tools and step types. Imports no Django."""

from .cancel import NEVER, CallContext, CancelToken, StepInterrupted
from .errors import (
    ConfigurationError,
    ProviderError,
    RunCancellationRequested,
    RunLeaseLost,
    SegmentInterrupted,
    ToolError,
)
from .loop import DENIED_RESULT, INTERRUPTED_RESULT, ToolLoop, tool_content
from .pricing import Price
from .replay import rebuild_state
from .steps import LoopOutcome, LoopResult, LoopState, ModelResponse, Step, StepKind, ToolCall, Trace, Usage

__all__ = [
    "INTERRUPTED_RESULT",
    "NEVER",
    "CallContext",
    "CancelToken",
    "StepInterrupted",
    "DENIED_RESULT",
    "ConfigurationError",
    "RunLeaseLost",
    "SegmentInterrupted",
    "LoopOutcome",
    "LoopResult",
    "LoopState",
    "ModelResponse",
    "Price",
    "ProviderError",
    "RunCancellationRequested",
    "Step",
    "StepKind",
    "ToolCall",
    "ToolError",
    "ToolLoop",
    "Trace",
    "Usage",
    "rebuild_state",
    "tool_content",
]
