"""The tool-calling loop. It knows nothing of storage: every step goes through ``trace``.

The trace hook is called at each step boundary (request recorded before a model call,
the model's answer, each tool execution, an approval decision). Whatever it raises
propagates: that is how the runtime stops a loop at a boundary. The loop's own
``except Exception`` handlers wrap only provider and tool calls, never the hook.

A cancel token may also cut the call in flight short: the call is then recorded as an
interrupted step (a model call with what it had produced, a tool call with no result) and
the loop stops with ``RunCancellationRequested``. Nothing starts once the token has tripped.
"""

from __future__ import annotations

import inspect
import json
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .cancel import NEVER, CallContext, CancelToken, StepInterrupted
from .errors import RunCancellationRequested, ToolError
from .idempotency import idempotency_key
from .pricing import Price
from .providers.base import Provider
from .providers.failures import redact
from .sanitize import clean_response, clean_text, clean_value
from .steps import LoopOutcome, LoopResult, LoopState, Step, StepKind, ToolCall, Trace, Usage
from .tools.base import Tool, is_sub_agent, schema

DENIED_RESULT = "The operator denied this call; it was not executed."
INTERRUPTED_RESULT = "interrupted: the run was cancelled while this call was running"
_MAX_ERROR_CHARS = 500


def _safe_error(exc: BaseException) -> str:
    """The error's class and text, key-shaped tokens scrubbed before the cut, made storable."""
    return clean_text(redact(f"{type(exc).__name__}: {exc}")[:_MAX_ERROR_CHARS])


def _elapsed_ms(t0: float) -> float:
    return round((time.perf_counter() - t0) * 1000, 3)


def tool_content(result: Any, error: str | None) -> str:
    """The tool message the model sees for a result or an error."""
    if error is not None:
        return f"error: {error}"
    if isinstance(result, str):
        return result
    return json.dumps(result, default=str, ensure_ascii=False)


def accepts_context(function: Callable[..., Any]) -> bool:
    """Whether a provider's ``complete`` or a tool's ``execute`` takes a ``context`` argument.

    Providers and tools written before the cancel token existed take none; they are called
    as before and run to their step boundary.
    """
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == "context" or p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters)


class ToolLoop:
    """Drives provider and tools until an answer, a limit, an approval gate or a failure.

    Parameters
    ----------
    provider, tools: what answers chat turns, and the tools offered to the model, by name.
    trace: called once per step, in order; may raise to stop the loop at that boundary.
    max_iterations: the cap on model calls across the whole run (resumes included).
    on_deny: ``"continue"`` feeds a denial back to the model; ``"stop"`` ends the run.
    before_effect: called right before a non-idempotent tool starts (the write fence); may raise.
    token: trips on cancel; handed to providers and tools that take a ``context``, checked before each call.
    before_start: called right before any call starts, with whether it may wait (not an ``instant`` one); may raise.
    on_delta, on_progress: receive ``(round, text)`` as a model call streams its answer, and
        ``(round, call, progress, total, message)`` as a tool call reports how far it got.
    price: the model's price in force for this drive; each model call's usage and step carry its cost.
    before_call: called with the transcript right before a model call, before its gate (the runtime
        reserves the call's worst case against the shared budgets there); may raise to stop the loop.
    carrier: called right before a model call (``None``) or a tool call (the call) starts, after
        every gate; returns the trace context's headers for it (``CallContext.headers``), or ``None``.
    run_id: the run driven; its tool calls' ``CallContext.idempotency_key`` derive from it (``None``: no key).
    in_transaction: runs a ``transactional`` tool's call with its step in one transaction (``None``: as any tool).
    """

    def __init__(
        self,
        provider: Provider,
        tools: Mapping[str, Tool],
        *,
        trace: Trace,
        max_iterations: int = 10,
        on_deny: str = "continue",
        before_effect: Callable[[ToolCall], None] | None = None,
        token: CancelToken = NEVER,
        before_start: Callable[[bool], None] | None = None,
        on_delta: Callable[[int, str], None] | None = None,
        on_progress: Callable[[int, ToolCall, float, float | None, str | None], None] | None = None,
        price: Price | None = None,
        carrier: Callable[[ToolCall | None], Mapping[str, str]] | None = None,
        before_call: Callable[[Sequence[Mapping[str, Any]]], None] | None = None,
        run_id: str | None = None,
        in_transaction: Callable[[Callable[[], None]], None] | None = None,
    ) -> None:
        self.provider = provider
        self.tools = dict(tools)
        self.trace = trace
        self.max_iterations = max_iterations
        self.on_deny = on_deny
        self.before_effect = before_effect
        self.token = token
        self.before_start = before_start
        self.on_delta = on_delta
        self.on_progress = on_progress
        self.price = price
        self.carrier = carrier
        self.before_call = before_call
        self.run_id = run_id
        self.in_transaction = in_transaction
        self._schemas = [schema(t) for t in self.tools.values()]
        self._provider_context = accepts_context(provider.complete)
        self._tool_context = {name: accepts_context(t.execute) for name, t in self.tools.items()}

    def start(self, prompt: str, *, system: str | None = None) -> LoopResult:
        """Begin a conversation from a user prompt."""
        messages: list[dict[str, Any]] = []
        if system:
            messages.append({"role": "system", "content": system})
        messages.append({"role": "user", "content": prompt})
        return self._drive(LoopState(messages=messages))

    def resume(self, state: LoopState, *, approved: bool, decision: Mapping[str, Any] | None = None) -> LoopResult:
        """Continue a suspended loop after a human decision on its pending calls.

        The decision is recorded as an ``approval`` step first. Approved: every call of
        the suspended turn executes in order. Denied: each call is answered with a denial
        and (``on_deny="continue"``) the model is asked again.
        """
        calls, state.pending_calls = list(state.pending_calls), []
        doubt, state.in_doubt = state.in_doubt, None
        decided = dict(decision or {})
        if doubt is not None:  # which call the decision is about, in the audit
            decided["in_doubt_call"] = doubt.get("call")
        self.trace(
            Step(
                StepKind.APPROVAL,
                state.round,
                {"approved": approved, "calls": [c.as_dict() for c in calls], **decided},
            )
        )
        if approved and doubt is not None and decided.get("in_doubt") == "happened":
            calls = self._happened(state, calls, (doubt.get("call") or {}).get("id"), decided.get("result"))
        if approved:
            failed = self._run_calls(state, calls)
            if failed is not None:
                return failed
        else:
            for call in calls:
                # Recorded as tool steps so the stream alone can rebuild the transcript.
                self._record_tool(state, call, None, DENIED_RESULT, 0.0)
            if self.on_deny == "stop":
                return LoopResult(LoopOutcome.APPROVAL_DENIED, state)
        return self._drive(state)

    def proceed(self, state: LoopState) -> LoopResult:
        """Continue a state rebuilt from the stream: finish the last turn's calls, then go on.

        A turn that holds a gated call and has no recorded decision suspends again; a
        denied turn answers its remaining calls with the denial. A stream that already ends
        with the model's final answer (the segment stopped before settling) completes with
        that answer: the model is not asked again.
        """
        if state.in_doubt is not None:
            if not state.in_doubt.get("happened"):  # a lost worker may have made one of them: a person decides
                return LoopResult(LoopOutcome.AWAITING_APPROVAL, state)
            # decided "it happened", and the worker that recorded the decision was lost before its result
            doubt, state.in_doubt = state.in_doubt, None
            calls = self._happened(state, state.pending_calls, (doubt.get("call") or {}).get("id"), doubt.get("result"))
            state.pending_calls = calls
        calls = list(state.pending_calls)
        last = state.messages[-1] if state.messages else {}
        if not calls and last.get("role") == "assistant" and not last.get("tool_calls"):
            return LoopResult(LoopOutcome.COMPLETED, state, final_text=last.get("content") or "")
        if state.decision is None and any((t := self.tools.get(c.name)) and t.requires_approval for c in calls):
            return LoopResult(LoopOutcome.AWAITING_APPROVAL, state)
        if state.decision is not False and self._awaiting(calls):
            return LoopResult(LoopOutcome.AWAITING_CHILDREN, state)
        state.pending_calls = []
        if state.decision is False:
            for call in calls:
                self._record_tool(state, call, None, DENIED_RESULT, 0.0)
            if self.on_deny == "stop":
                return LoopResult(LoopOutcome.APPROVAL_DENIED, state)
        else:
            failed = self._run_calls(state, calls)
            if failed is not None:
                return failed
        return self._drive(state)

    def _drive(self, state: LoopState) -> LoopResult:
        tool_names = sorted(self.tools)
        while True:
            if state.iterations >= self.max_iterations:
                return LoopResult(LoopOutcome.MAX_ITERATIONS, state)
            self._gate(waits=False)  # the request step opens the model call: nothing opens once stopped
            state.round += 1
            new_messages = state.messages[state.sent :]
            state.sent = len(state.messages)
            self.trace(
                Step(
                    StepKind.REQUEST,
                    state.round,
                    {
                        "provider": self.provider.name,
                        "model": self.provider.model,
                        "messages": new_messages,
                        "message_count": len(state.messages),
                        "tools": tool_names,
                    },
                )
            )
            if self.before_call is not None:
                self.before_call(state.messages)
            self._gate(waits=not getattr(self.provider, "instant", False))
            headers = self.carrier(None) if self.carrier is not None else None
            t0 = time.perf_counter()
            try:
                response = self._complete(state, headers)
            except StepInterrupted as stop:
                self._interrupted_llm(state, stop, t0)
            except Exception as exc:  # a provider failure ends the run; control flow is BaseException
                if self.token.cancelled:  # the abort broke the call: an interruption, not a failure
                    self._interrupted_llm(state, StepInterrupted(), t0)
                self._failed_llm(state, exc, t0)
                return LoopResult(LoopOutcome.PROVIDER_FAILED, state, error=exc)
            response, usage_note = clean_response(response)  # what the provider sent, made storable
            state.iterations += 1
            usage = self._priced(response.usage)
            state.usage = state.usage + usage
            calls = list(response.tool_calls)
            assistant: dict[str, Any] = {"role": "assistant", "content": response.content}
            if calls:
                assistant["tool_calls"] = [c.as_dict() for c in calls]
            state.messages.append(assistant)
            state.sent = len(state.messages)
            answer: dict[str, Any] = {
                "content": response.content,
                "tool_calls": [c.as_dict() for c in calls],
                "usage": usage.as_dict(),
                "finish_reason": response.finish_reason,
                **self._price_record(),
            }
            if usage_note is not None:
                answer["usage_note"] = usage_note
            if response.model:
                answer["model"] = response.model
            self.trace(Step(StepKind.LLM, state.round, answer, duration_ms=_elapsed_ms(t0)))
            if not calls:
                return LoopResult(LoopOutcome.COMPLETED, state, final_text=response.content or "")
            gated = [c.name for c in calls if (t := self.tools.get(c.name)) and t.requires_approval]
            if gated:
                # Checked before any call of the turn runs: nothing executes until a decision.
                state.pending_calls = calls
                return LoopResult(LoopOutcome.AWAITING_APPROVAL, state)
            if self._awaiting(calls):
                # Sub-agents answer these calls: the loop stops here, holding nothing, and
                # continues from the stream once their runs have ended (runtime.trees).
                state.pending_calls = calls
                return LoopResult(LoopOutcome.AWAITING_CHILDREN, state)
            failed = self._run_calls(state, calls)
            if failed is not None:
                return failed

    def _happened(self, state: LoopState, calls: Sequence[ToolCall], doubted: Any, result: Any) -> list[ToolCall]:
        """A person said the call ``doubted`` (an id), which a lost worker was making, did happen:
        record ``result`` (theirs) as its step; it is not made again. Returns the other calls."""
        for call in [c for c in calls if c.id == doubted]:
            self._record_tool(state, call, clean_value(result), None, 0.0, details={"in_doubt": "happened"})
        return [c for c in calls if c.id != doubted]

    def _awaiting(self, calls: Sequence[ToolCall]) -> bool:
        """Whether a sub-agent's run for one of ``calls`` has not ended (or not started)."""
        return any(is_sub_agent(t := self.tools.get(c.name)) and t.awaits(c, calls) for c in calls)  # type: ignore[union-attr]

    def _gate(self, *, waits: bool = True) -> None:
        """Right before a call starts: nothing starts once the token has tripped. ``waits``:
        the call may wait (on the network, a clock, a lock), as every call but an instant one's."""
        if self.token.cancelled:
            raise RunCancellationRequested()
        if self.before_start is not None:
            self.before_start(waits)

    def _context(
        self, state: LoopState, headers: Mapping[str, str] | None = None, call: ToolCall | None = None
    ) -> CallContext:
        round_ = state.round
        sink = None
        if self.on_delta is not None and call is None:
            publish = self.on_delta
            sink = lambda text: publish(round_, text)  # noqa: E731
        progress = None
        if self.on_progress is not None and call is not None:
            report, tool_call = self.on_progress, call
            progress = lambda value, total, message: report(round_, tool_call, value, total, message)  # noqa: E731
        return CallContext(
            token=self.token,
            on_delta=sink,
            round=round_,
            call_index=state.iterations,
            headers=headers or {},
            on_progress=progress,
            idempotency_key=(
                idempotency_key(self.run_id, round_, call.id) if call is not None and self.run_id is not None else None
            ),
        )

    def _complete(self, state: LoopState, headers: Mapping[str, str] | None = None) -> Any:
        if self._provider_context:
            provider: Any = self.provider  # a provider that takes the optional ``context``
            return provider.complete(state.messages, self._schemas, context=self._context(state, headers))
        return self.provider.complete(state.messages, self._schemas)

    def _interrupted_llm(self, state: LoopState, stop: StepInterrupted, t0: float) -> None:
        """Record a model call cut short by a cancel, with what it produced; then stop.

        The partial answer is not added to the transcript (it is not a turn the model
        finished, and tool calls it had begun must not stand unanswered); its spend counts.
        """
        partial, usage_note = clean_response(stop.partial) if stop.partial is not None else (None, None)
        usage = self._priced(partial.usage if partial is not None else Usage(), estimated=stop.usage_estimated)
        state.iterations += 1
        state.usage = state.usage + usage
        payload: dict[str, Any] = {
            "content": partial.content if partial is not None else None,
            "tool_calls": [],
            "partial_tool_calls": clean_value(stop.partial_tool_calls),
            "usage": usage.as_dict(),
            "usage_estimated": stop.usage_estimated,
            "finish_reason": "interrupted",
            "interrupted": True,
            **self._price_record(),
        }
        if usage_note is not None:
            payload["usage_note"] = usage_note
        self.trace(Step(StepKind.LLM, state.round, payload, duration_ms=_elapsed_ms(t0)))
        raise RunCancellationRequested()  # when the boundary probe could not confirm it

    def _failed_llm(self, state: LoopState, exc: Exception, t0: float) -> None:
        """Record a model call that failed, with its error: the stream tells why the run stopped.

        It is no turn of the transcript and no iteration (a retry asks the model again).
        """
        payload: dict[str, Any] = {"content": None, "tool_calls": [], "usage": Usage().as_dict()}
        payload.update({"finish_reason": "error", "failed": True, "error": _safe_error(exc)})
        self.trace(Step(StepKind.LLM, state.round, payload, duration_ms=_elapsed_ms(t0)))

    def _priced(self, usage: Usage, *, estimated: bool = False) -> Usage:
        return usage if self.price is None else self.price.priced(usage, estimated=estimated)

    def _price_record(self) -> dict[str, Any]:
        return {} if self.price is None else {"price": self.price.as_dict()}

    def _run_calls(self, state: LoopState, calls: Sequence[ToolCall]) -> LoopResult | None:
        for call in calls:
            tool = self.tools.get(call.name)
            error: str | None = None
            fatal: Exception | None = None
            result: Any = None
            interrupted = False
            seen: dict[str, Any] = {}
            if tool is None:
                t0 = time.perf_counter()
                error = f"unknown tool {call.name!r}"
            else:
                self._gate(waits=not getattr(tool, "instant", False))
                transactional = self._transactional(tool)
                if self.before_effect is not None and not getattr(tool, "idempotent", True) and not transactional:
                    self.before_effect(call)  # a transactional tool needs no fence: its writes commit with its step
                headers = self.carrier(call) if self.carrier is not None else None
                t0 = time.perf_counter()
                if transactional:
                    failed = self._run_in_transaction(state, call, tool, calls, headers, t0)
                    if failed is not None:
                        return failed
                    continue
                try:
                    result = self._execute(state, call, tool, calls, headers)
                except StepInterrupted as stop:
                    interrupted, seen = True, clean_value(stop.details)
                except ToolError as exc:
                    error = clean_text(str(exc))
                except Exception as exc:  # ends the run as tool_failed, after the step is recorded
                    if self.token.cancelled:  # broken by the abort: an interruption, not a failure
                        interrupted = True
                    else:
                        fatal = exc
                        error = _safe_error(exc)
            if interrupted:
                self._record_tool(
                    state, call, None, INTERRUPTED_RESULT, _elapsed_ms(t0), interrupted=True, details=seen
                )
                raise RunCancellationRequested()  # when the boundary probe could not confirm it
            self._record_tool(state, call, result, error, _elapsed_ms(t0))
            if fatal is not None:
                return LoopResult(LoopOutcome.TOOL_FAILED, state, error=fatal)
        return None

    def _transactional(self, tool: Tool) -> bool:
        """Whether ``tool`` runs in the transaction that records its step (``transactional``)."""
        wanted = bool(getattr(tool, "transactional", False))
        return wanted and self.in_transaction is not None and not is_sub_agent(tool)

    def _execute(
        self, state: LoopState, call: ToolCall, tool: Tool, calls: Sequence[ToolCall], headers: Mapping[str, str] | None
    ) -> Any:
        """Make one tool call; its result made storable. Raises what the tool raises."""
        if is_sub_agent(tool):  # answered by its run, which has ended: nothing executes
            sub: Any = tool
            return clean_value(sub.answer(call, calls))
        if self._tool_context.get(call.name):
            aware: Any = tool  # a tool that takes the optional ``context``
            return clean_value(aware.execute(dict(call.arguments), context=self._context(state, headers, call)))
        return clean_value(tool.execute(dict(call.arguments)))

    def _run_in_transaction(
        self,
        state: LoopState,
        call: ToolCall,
        tool: Tool,
        calls: Sequence[ToolCall],
        headers: Mapping[str, str] | None,
        t0: float,
    ) -> LoopResult | None:
        """A transactional tool's call: its writes and its ``tool`` step commit together, or neither.

        The call's error (``ToolError`` or any other) rolls its writes back; the step then records
        the error, as for any tool. A cancel, whether it interrupts the call or refuses the step's
        fence at the commit, rolls the writes back too: the call is recorded interrupted, with
        ``rolled_back: true``, and the loop stops. A stop decided after the commit (a deadline, a
        shutdown) and a lost lease propagate as they are.
        """
        assert self.in_transaction is not None
        mark = (len(state.messages), state.sent)
        phase = "call"  # then "record" (the step's fence), then "recorded" (the commit follows)

        def body() -> None:
            nonlocal phase
            result = self._execute(state, call, tool, calls, headers)
            phase = "record"
            self._record_tool(state, call, result, None, _elapsed_ms(t0))
            phase = "recorded"

        error: str | None = None
        fatal: Exception | None = None
        seen: dict[str, Any] = {}
        try:
            self.in_transaction(body)
            return None
        except StepInterrupted as stop:
            seen = clean_value(stop.details)
        except RunCancellationRequested:
            if phase != "record":  # stopped after the commit (a deadline, a budget): the step stands
                raise
            del state.messages[mark[0] :]  # the fence refused the step: the run was cancelled meanwhile
            state.sent = mark[1]
        except ToolError as exc:
            if phase != "call":
                raise
            error = clean_text(str(exc))
        except Exception as exc:
            if phase != "call":
                raise  # the store's or the runtime's (a lost lease, a commit that failed): not the tool's
            if not self.token.cancelled:  # broken by the abort: an interruption, not a failure
                fatal, error = exc, _safe_error(exc)
        if error is None:  # interrupted, its writes rolled back
            details = {**seen, "rolled_back": True}
            self._record_tool(state, call, None, INTERRUPTED_RESULT, _elapsed_ms(t0), interrupted=True, details=details)
            raise RunCancellationRequested()  # when the boundary probe could not confirm it
        self._record_tool(state, call, None, error, _elapsed_ms(t0), details={"rolled_back": True})
        return LoopResult(LoopOutcome.TOOL_FAILED, state, error=fatal) if fatal is not None else None

    def _record_tool(
        self,
        state: LoopState,
        call: ToolCall,
        result: Any,
        error: str | None,
        duration_ms: float,
        *,
        interrupted: bool = False,
        details: Mapping[str, Any] | None = None,
    ) -> None:
        state.messages.append({"role": "tool", "tool_call_id": call.id, "content": tool_content(result, error)})
        state.sent = len(state.messages)
        payload: dict[str, Any] = {
            "call_id": call.id,
            "name": call.name,
            "arguments": call.arguments,
            "result": None if error is not None else result,
            "error": error,
        }
        if interrupted:
            payload["interrupted"] = True
        for key, value in (details or {}).items():  # what the call had seen (progress), never our own keys
            payload.setdefault(key, value)
        self.trace(Step(StepKind.TOOL, state.round, payload, duration_ms=duration_ms))
