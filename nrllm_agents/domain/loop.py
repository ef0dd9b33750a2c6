"""The tool-calling loop. It knows nothing of storage: every step goes through ``trace``.

The trace hook is called at each step boundary (request recorded before a model call,
the model's answer, each tool execution, an approval decision). Whatever it raises
propagates: that is how the runtime stops a loop at a boundary. The loop's own
``except Exception`` handlers wrap only provider and tool calls, never the hook.
"""

from __future__ import annotations

import json
import time
from typing import Any, Mapping, Sequence

from .errors import ToolError
from .providers.base import Provider
from .steps import LoopOutcome, LoopResult, LoopState, Step, StepKind, ToolCall, Trace
from .tools.base import Tool, schema

DENIED_RESULT = "The operator denied this call; it was not executed."
_MAX_ERROR_CHARS = 500


def _safe_error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:_MAX_ERROR_CHARS]


def _elapsed_ms(t0: float) -> float:
    return round((time.perf_counter() - t0) * 1000, 3)


def _as_content(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, default=str, ensure_ascii=False)


class ToolLoop:
    """Drives provider and tools until an answer, a limit, an approval gate or a failure.

    Parameters
    ----------
    provider: answers chat turns.
    tools: the tools offered to the model, by name.
    trace: called once per step, in order; may raise to stop the loop at that boundary.
    max_iterations: the cap on model calls across the whole run (resumes included).
    on_deny: ``"continue"`` feeds a denial back to the model; ``"stop"`` ends the run.
    """

    def __init__(self, provider: Provider, tools: Mapping[str, Tool], *, trace: Trace,
                 max_iterations: int = 10, on_deny: str = "continue") -> None:
        self.provider = provider
        self.tools = dict(tools)
        self.trace = trace
        self.max_iterations = max_iterations
        self.on_deny = on_deny
        self._schemas = [schema(t) for t in self.tools.values()]

    def start(self, prompt: str, *, system: str | None = None) -> LoopResult:
        """Begin a conversation from a user prompt."""
        messages: list[dict[str, Any]] = []
        if system:
            messages.append({"role": "system", "content": system})
        messages.append({"role": "user", "content": prompt})
        return self._drive(LoopState(messages=messages))

    def resume(self, state: LoopState, *, approved: bool,
               decision: Mapping[str, Any] | None = None) -> LoopResult:
        """Continue a suspended loop after a human decision on its pending calls.

        The decision is recorded as an ``approval`` step first. Approved: every call of
        the suspended turn executes in order. Denied: each call is answered with a denial
        and (``on_deny="continue"``) the model is asked again.
        """
        calls, state.pending_calls = list(state.pending_calls), []
        self.trace(Step(StepKind.APPROVAL, state.round, {
            "approved": approved,
            "calls": [c.as_dict() for c in calls],
            **dict(decision or {}),
        }))
        if approved:
            failed = self._run_calls(state, calls)
            if failed is not None:
                return failed
        else:
            for call in calls:
                state.messages.append({"role": "tool", "tool_call_id": call.id, "content": DENIED_RESULT})
            if self.on_deny == "stop":
                return LoopResult(LoopOutcome.APPROVAL_DENIED, state)
        return self._drive(state)

    def _drive(self, state: LoopState) -> LoopResult:
        tool_names = sorted(self.tools)
        while True:
            if state.iterations >= self.max_iterations:
                return LoopResult(LoopOutcome.MAX_ITERATIONS, state)
            state.round += 1
            new_messages = state.messages[state.sent:]
            state.sent = len(state.messages)
            self.trace(Step(StepKind.REQUEST, state.round, {
                "provider": self.provider.name,
                "model": self.provider.model,
                "messages": new_messages,
                "message_count": len(state.messages),
                "tools": tool_names,
            }))
            t0 = time.perf_counter()
            try:
                response = self.provider.complete(state.messages, self._schemas)
            except Exception as exc:  # a provider failure ends the run; control flow is BaseException
                return LoopResult(LoopOutcome.PROVIDER_FAILED, state, error=exc)
            state.iterations += 1
            state.usage = state.usage + response.usage
            calls = list(response.tool_calls)
            assistant: dict[str, Any] = {"role": "assistant", "content": response.content}
            if calls:
                assistant["tool_calls"] = [c.as_dict() for c in calls]
            state.messages.append(assistant)
            state.sent = len(state.messages)
            self.trace(Step(StepKind.LLM, state.round, {
                "content": response.content,
                "tool_calls": [c.as_dict() for c in calls],
                "usage": response.usage.as_dict(),
                "finish_reason": response.finish_reason,
            }, duration_ms=_elapsed_ms(t0)))
            if not calls:
                return LoopResult(LoopOutcome.COMPLETED, state, final_text=response.content or "")
            gated = [c.name for c in calls if (t := self.tools.get(c.name)) and t.requires_approval]
            if gated:
                # Checked before any call of the turn runs: nothing executes until a decision.
                state.pending_calls = calls
                return LoopResult(LoopOutcome.AWAITING_APPROVAL, state)
            failed = self._run_calls(state, calls)
            if failed is not None:
                return failed

    def _run_calls(self, state: LoopState, calls: Sequence[ToolCall]) -> LoopResult | None:
        for call in calls:
            tool = self.tools.get(call.name)
            t0 = time.perf_counter()
            error: str | None = None
            fatal: Exception | None = None
            result: Any = None
            if tool is None:
                error = f"unknown tool {call.name!r}"
            else:
                try:
                    result = tool.execute(dict(call.arguments))
                except ToolError as exc:
                    error = str(exc)
                except Exception as exc:  # ends the run as tool_failed, after the step is recorded
                    fatal = exc
                    error = _safe_error(exc)
            content = f"error: {error}" if error is not None else _as_content(result)
            state.messages.append({"role": "tool", "tool_call_id": call.id, "content": content})
            state.sent = len(state.messages)
            self.trace(Step(StepKind.TOOL, state.round, {
                "call_id": call.id,
                "name": call.name,
                "arguments": call.arguments,
                "result": None if error is not None else result,
                "error": error,
            }, duration_ms=_elapsed_ms(t0)))
            if fatal is not None:
                return LoopResult(LoopOutcome.TOOL_FAILED, state, error=fatal)
        return None
