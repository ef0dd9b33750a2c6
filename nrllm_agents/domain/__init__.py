"""The agent domain: tool loop, providers, tools and step types. Imports no Django."""

from .errors import ConfigurationError, ProviderError, RunCancellationRequested, ToolError
from .loop import DENIED_RESULT, ToolLoop
from .steps import LoopOutcome, LoopResult, LoopState, ModelResponse, Step, StepKind, ToolCall, Trace, Usage

__all__ = [
    "DENIED_RESULT", "ConfigurationError", "LoopOutcome", "LoopResult", "LoopState", "ModelResponse",
    "ProviderError", "RunCancellationRequested", "Step", "StepKind", "ToolCall", "ToolError", "ToolLoop",
    "Trace", "Usage",
]
