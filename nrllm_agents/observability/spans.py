"""One segment's spans in OpenTelemetry's GenAI conventions: ``invoke_agent``, ``chat``, ``execute_tool``.

A segment is an ``invoke_agent`` span; each model call a ``chat`` span and each tool call an
``execute_tool`` span, its children. They are built from what the segment already hands its
hooks (the request, the moment a call starts, each recorded step, the cancel's acknowledgement),
so tracing never changes what a run does, and a failure here is logged and ignored.

Every segment of a run joins the run's trace: its parent is the context stored with the run (the
HTTP request that created it), or, for a run created with no span current, the context of its
first traced segment, which is stored then. The ``gen_ai.*`` names are the conventions' (still
"Development"); the ``nrllm.*`` names are ours (``docs/tracing.md``). A cancelled segment's span
and its interrupted step's span end in error with ``error.type = "cancelled"``, and the cancel is
an event on the segment's span at the moment it committed (``cancel_requested_at``), whichever
process committed it.

A sub-agent call is one ``execute_tool`` span, opened by the segment that starts the child run
(``spawning``) and ended when that segment suspends; the child run continues that span's context,
so its ``invoke_agent`` spans are the call's children. The segment that resumes once the children
ended opens no second span for the call: the answer is an event on its own span.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Link, SpanKind, Status, StatusCode

from .. import store
from ..domain import Usage
from ..domain.loop import DENIED_RESULT
from ..domain.providers.failures import redact
from ..domain.steps import decimal_text
from ..models import AgentRun
from ..store import trees as tree_store
from . import tracing

logger = logging.getLogger(__name__)

# gen_ai.provider.name for our provider kinds; any other kind is named as we name it.
PROVIDER_NAMES = {"openai": "openai", "anthropic": "anthropic", "gemini": "gcp.gemini"}
MAX_CONTENT_CHARS = 64_000  # one captured attribute's text (the messages of a call, a tool's result)
CANCEL_EVENT = "nrllm.cancel"


def approval_attributes(payload: Mapping[str, Any]) -> dict[str, Any]:
    """The ``nrllm.approval`` event's attributes: the decision, and who took it and why when
    the approval step says so (as the ``nrllm.cancel`` event says who cancelled and why)."""
    found: dict[str, Any] = {"nrllm.approval.approved": bool(payload.get("approved"))}
    if payload.get("by"):
        found["nrllm.approval.by"] = str(payload["by"])
    if payload.get("reason"):
        found["nrllm.approval.reason"] = str(payload["reason"])
    if payload.get("in_doubt"):  # a decision on a call in doubt: "happened" or "not_happened"
        found["nrllm.approval.in_doubt"] = str(payload["in_doubt"])
    return found


INTERRUPT_EVENT = "nrllm.interrupt"  # a segment that suspends for a person: an approval, or a call in doubt


def interrupt_attributes(run_id: str) -> dict[str, Any]:
    """The ``nrllm.interrupt`` event's attributes, read from the suspended run: what it waits for
    (``approval``, or ``in_doubt`` naming the call a lost worker may or may not have made)."""
    state = AgentRun.objects.filter(pk=run_id).values_list("suspended_state", flat=True).first() or {}
    doubt = state.get("in_doubt") if isinstance(state, dict) else None
    if not isinstance(doubt, dict):
        return {"nrllm.interrupt.kind": "approval"}
    call = doubt.get("call") or {}
    return {
        "nrllm.interrupt.kind": "in_doubt",
        "gen_ai.tool.name": str(call.get("name", "")),
        "gen_ai.tool.call.id": str(call.get("id", "")),
    }


ANSWERED_EVENT = "nrllm.sub_agent.answered"  # a sub-agent call's answer, read when its parent resumed
SUB_AGENT_RUN = "nrllm.sub_agent.run.id"  # the child run that answers a sub-agent call
# error.type of a call still in flight when its segment ended without recording it
_CUT_SHORT = {"lease_lost": "lease_lost", "requeued": "handed_back"}
_FAILED_OUTCOMES = {"failed", "lease_lost", "suspend_failed"}


def begin(trace_hook: Any, run_id: uuid.UUID, request: Any) -> SegmentSpans | None:
    """The spans of the segment about to run, its ``invoke_agent`` span started and current;
    ``None`` (and nothing done) when this process does not trace."""
    tracer = tracing.tracer()
    if tracer is None:
        return None
    try:
        return SegmentSpans(tracer, trace_hook, run_id, request)
    except Exception:
        logger.exception("run %s: its segment's span could not start; not traced", run_id)
        return None


def provider_name(kind: Any) -> str:
    return PROVIDER_NAMES.get(str(kind or ""), str(kind or "unknown"))


def _content(value: Any) -> str:
    """A captured content attribute: the value as the audit stored it, as JSON, keys scrubbed."""
    text = redact(json.dumps(value, default=str, ensure_ascii=False))
    return text if len(text) <= MAX_CONTENT_CHARS else text[: MAX_CONTENT_CHARS - 1] + "…"


def _parts(message: Mapping[str, Any]) -> dict[str, Any]:
    """One transcript message in the conventions' shape (``role`` and ``parts``)."""
    role = str(message.get("role") or "")
    parts: list[dict[str, Any]] = []
    if role == "tool":
        response = {"type": "tool_call_response", "id": message.get("tool_call_id"), "result": message.get("content")}
        parts.append(response)
    else:
        if message.get("content"):
            parts.append({"type": "text", "content": message.get("content")})
        for call in message.get("tool_calls") or ():
            if isinstance(call, Mapping):
                asked = {"type": "tool_call", "id": call.get("id"), "name": call.get("name")}
                parts.append({**asked, "arguments": call.get("arguments")})
    return {"role": role, "parts": parts}


def _ns(moment: datetime | str | None) -> int | None:
    if isinstance(moment, str):
        try:
            moment = datetime.fromisoformat(moment)
        except ValueError:
            return None
    return int(moment.timestamp() * 1e9) if isinstance(moment, datetime) else None


class _Open:
    """A model or tool call in flight: its span, the context made current for it, its start."""

    def __init__(self, span: Any, token: Any, started: int) -> None:
        self.span, self.token, self.started = span, token, started


class SegmentSpans:
    """The spans of one segment; created by ``begin``, fed by the hooks, ended by ``end``."""

    def __init__(self, tracer: trace.Tracer, trace_hook: Any, run_id: uuid.UUID, request: Any) -> None:
        self.tracer = tracer
        self.run_id = str(run_id)
        self.provider = str(getattr(request, "provider", "") or "")
        self.model = str(getattr(request, "model", "") or "")
        self.capture = tracing.capture_content()
        self.messages: list[Any] = []
        self.request: Mapping[str, Any] = {}
        self.usage = Usage()
        self.currency = ""
        self.cancel: Mapping[str, Any] | None = None
        self._open: _Open | None = None
        self._interrupted: tuple[Any, int] | None = None
        self.sub_agents = frozenset(str(name) for name in getattr(request, "agents", None) or ())
        self._spawned: dict[str, tuple[Any, str]] = {}  # call id -> its span, its child run's id
        self._answered: dict[str, str] = {}  # call id -> the child run whose answer it reads
        row: Mapping[str, Any] = AgentRun.objects.filter(pk=run_id).values("trace_context", "thread_id").first() or {}
        parent = tracing.context_from(row.get("trace_context"))
        current = trace.get_current_span().get_span_context()
        links = []
        if parent is not None and current.is_valid:
            if current.trace_id != trace.get_current_span(parent).get_span_context().trace_id:
                links.append(Link(current))  # e.g. the HTTP request that approved a waiting run
        agent = getattr(request, "agent", None)
        name = f"invoke_agent {agent}" if agent else "invoke_agent"
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.provider.name": provider_name(self.provider),
            "nrllm.run.id": self.run_id,
            "nrllm.segment.kind": str(trace_hook.owner).split(":", 1)[0],
        }
        if self.model:
            attributes["gen_ai.request.model"] = self.model
        if agent:
            attributes["gen_ai.agent.name"] = str(agent)
            record = getattr(request, "agent_record", None) or {}
            if record.get("agent_id") is not None:  # the agent's, not its version's ("id")
                attributes["gen_ai.agent.id"] = str(record["agent_id"])
            if getattr(request, "agent_version", None) is not None:
                attributes["gen_ai.agent.version"] = str(request.agent_version)
        if row.get("thread_id"):
            attributes["gen_ai.conversation.id"] = str(row["thread_id"])
        self.span = tracer.start_span(name, context=parent, kind=SpanKind.INTERNAL, attributes=attributes, links=links)
        self.context = trace.set_span_in_context(self.span, parent)
        self.token = otel_context.attach(self.context)
        if parent is None and self.span.get_span_context().is_valid:
            store.keep_trace_context(run_id, tracing.carrier(self.context))  # its later segments join this trace

    # --- calls --------------------------------------------------------------------------------
    def starting(self, call: Any) -> Mapping[str, str]:
        """A model call (``call`` None) or a tool call starts: its span, current while it runs.
        Returns the headers that carry its context (the loop's ``carrier``). A sub-agent call
        whose child run exists gets none: its span was the spawning segment's (``spawning``)."""
        try:
            self._close_open("superseded")
            if call is not None and str(call.name) in self.sub_agents:
                child = tree_store.child_of(uuid.UUID(self.run_id), str(call.id))
                if child is not None:
                    self._answered[str(call.id)] = str(child["id"])
                    return {}
            if call is None:
                model = str(self.request.get("model") or self.model)
                attributes: dict[str, Any] = {
                    "gen_ai.operation.name": "chat",
                    "gen_ai.provider.name": provider_name(self.request.get("provider") or self.provider),
                    "gen_ai.request.model": model,
                    "nrllm.run.id": self.run_id,
                }
                if self.capture:
                    attributes["gen_ai.input.messages"] = _content([_parts(m) for m in self.messages if m])
                name, kind = (f"chat {model}" if model else "chat"), SpanKind.CLIENT
            else:
                attributes = self._tool_attributes(call)
                name, kind = f"execute_tool {call.name}", SpanKind.INTERNAL
            started = time.time_ns()
            span = self.tracer.start_span(
                name, context=self.context, kind=kind, attributes=attributes, start_time=started
            )
            ctx = trace.set_span_in_context(span, self.context)
            self._open = _Open(span, otel_context.attach(ctx), started)
            return tracing.carrier(ctx)
        except Exception:
            logger.exception("run %s: a call's span could not start; the call goes on untraced", self.run_id)
            return {}

    def _tool_attributes(self, call: Any) -> dict[str, Any]:
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": str(call.name),
            "gen_ai.tool.call.id": str(call.id),
            "gen_ai.tool.type": "function",
            "nrllm.run.id": self.run_id,
        }
        if self.capture:
            attributes["gen_ai.tool.call.arguments"] = _content(call.arguments)
        return attributes

    def spawning(self, call: Any, child_id: uuid.UUID) -> Mapping[str, str]:
        """A sub-agent call is about to start the child run ``child_id``, and this segment to
        suspend for it: the call's ``execute_tool`` span, ended with the segment (``end``).
        Returns the context the child run continues (empty when the span could not start)."""
        try:
            name = f"execute_tool {call.name}"
            span = self.tracer.start_span(name, context=self.context, attributes=self._tool_attributes(call))
            self._spawned[str(call.id)] = (span, str(child_id))
            return tracing.carrier(trace.set_span_in_context(span, self.context))
        except Exception:
            logger.exception("run %s: a sub-agent call's span could not start; its run goes on", self.run_id)
            return {}

    def step(self, step: Any, sequence: int) -> None:
        """A step was recorded at a boundary: it ends the span of its call."""
        try:
            kind = step.kind.value
            payload = step.payload if isinstance(step.payload, Mapping) else {}
            if kind == "request":
                self.request = payload
                self.messages.extend(payload.get("messages") or ())
                if not self.model and payload.get("model"):
                    self.model = str(payload["model"])
                    self.span.set_attribute("gen_ai.request.model", self.model)
            elif kind == "llm":
                self._model_answered(payload, step.duration_ms, sequence)
            elif kind == "tool":
                self._tool_answered(payload, step.duration_ms, sequence)
            elif kind == "approval":
                self.span.add_event("nrllm.approval", approval_attributes(payload))
        except Exception:
            logger.exception("run %s: step %s could not be traced; ignored", self.run_id, sequence)

    def _taken(self, duration_ms: Any, name: str, kind: SpanKind, attributes: dict[str, Any]) -> tuple[Any, int]:
        """The span of the call a step answers, and when it ended: the one opened for it, or,
        for a call nothing announced (an unknown tool), one made now from its duration."""
        elapsed = int(float(duration_ms or 0) * 1e6)
        opened, self._open = self._open, None
        if opened is None:
            end = time.time_ns()
            span = self.tracer.start_span(
                name, context=self.context, kind=kind, attributes=attributes, start_time=end - elapsed
            )
            return span, end
        otel_context.detach(opened.token)
        opened.span.set_attributes(attributes)
        return opened.span, min(time.time_ns(), opened.started + elapsed)

    def _model_answered(self, payload: Mapping[str, Any], duration_ms: Any, sequence: int) -> None:
        usage = Usage.from_dict(payload.get("usage") if isinstance(payload.get("usage"), dict) else None)
        self.usage = self.usage + usage
        price = payload["price"] if isinstance(payload.get("price"), Mapping) else {}
        self.currency = str(price.get("currency") or self.currency)
        model = str(self.request.get("model") or self.model)
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": provider_name(self.request.get("provider") or self.provider),
            "gen_ai.request.model": model,
            "gen_ai.usage.input_tokens": usage.prompt_tokens,
            "gen_ai.usage.output_tokens": usage.completion_tokens,
            "gen_ai.response.finish_reasons": (str(payload.get("finish_reason") or "stop"),),
            "nrllm.run.id": self.run_id,
            "nrllm.step.sequence": sequence,
        }
        if payload.get("model"):
            attributes["gen_ai.response.model"] = str(payload["model"])
        attributes.update(self._cost(usage))
        if self.capture and not payload.get("failed"):
            answer = {"role": "assistant", "content": payload.get("content"), "tool_calls": payload.get("tool_calls")}
            attributes["gen_ai.output.messages"] = _content(
                [{**_parts(answer), "finish_reason": str(payload.get("finish_reason") or "stop")}]
            )
        span, end = self._taken(duration_ms, f"chat {model}" if model else "chat", SpanKind.CLIENT, attributes)
        if payload.get("interrupted"):
            span.set_attribute("nrllm.step.interrupted", True)
            self._interrupted = (span, end)  # ended with the cancel's attributes, once acknowledged
            return
        if payload.get("failed"):
            kind = str(payload.get("error") or "error").split(":", 1)[0][:100]
            span.set_attribute("error.type", kind)
            span.set_status(Status(StatusCode.ERROR, kind))
        span.end(end_time=end)

    def _tool_answered(self, payload: Mapping[str, Any], duration_ms: Any, sequence: int) -> None:
        error = payload.get("error")
        if error == DENIED_RESULT and self._open is None:
            return  # denied by the operator: never executed
        child = self._answered.pop(str(payload.get("call_id") or ""), None)
        if child is not None:
            self._sub_agent_answered(payload, child, sequence)
            return
        name = str(payload.get("name") or "")
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": name,
            "gen_ai.tool.call.id": str(payload.get("call_id") or ""),
            "nrllm.run.id": self.run_id,
            "nrllm.step.sequence": sequence,
        }
        if self.capture and error is None and not payload.get("interrupted"):
            attributes["gen_ai.tool.call.result"] = _content(payload.get("result"))
        span, end = self._taken(duration_ms, f"execute_tool {name}", SpanKind.INTERNAL, attributes)
        if payload.get("interrupted"):
            span.set_attribute("nrllm.step.interrupted", True)
            self._interrupted = (span, end)
            return
        if error is not None:
            span.set_attribute("error.type", "tool_error")
            span.set_status(Status(StatusCode.ERROR, "tool_error"))
        span.end(end_time=end)

    def _sub_agent_answered(self, payload: Mapping[str, Any], child: str, sequence: int) -> None:
        """The answer of a sub-agent call whose span the spawning segment ended: an event here."""
        found: dict[str, Any] = {
            "gen_ai.tool.name": str(payload.get("name") or ""),
            "gen_ai.tool.call.id": str(payload.get("call_id") or ""),
            SUB_AGENT_RUN: child,
            "nrllm.step.sequence": sequence,
        }
        if payload.get("error") is not None:
            found["error.type"] = "tool_error"
        elif self.capture:
            found["gen_ai.tool.call.result"] = _content(payload.get("result"))
        self.span.add_event(ANSWERED_EVENT, found)

    def _cost(self, usage: Usage) -> dict[str, Any]:
        if usage.cost is None:
            return {}
        found: dict[str, Any] = {"nrllm.cost.amount": decimal_text(usage.cost)}
        if self.currency:
            found["nrllm.cost.currency"] = self.currency
        if usage.cost_estimated:
            found["nrllm.cost.estimated"] = True
        return found

    # --- the end --------------------------------------------------------------------------------
    def cancelled(self, payload: Mapping[str, Any]) -> None:
        """The segment stopped for a cancel and appended ``cancelled``: who, from where, why, and
        the event at the moment the cancel committed."""
        try:
            self.cancel = payload
            when = _ns(payload.get("requested_at"))
            self.span.add_event(CANCEL_EVENT, self._cancel_attributes(), timestamp=when)
        except Exception:
            logger.exception("run %s: the cancel could not be traced; ignored", self.run_id)

    def _cancel_attributes(self) -> dict[str, Any]:
        payload = self.cancel or {}
        found = {
            "nrllm.cancel.source": str(payload.get("source") or ""),
            "nrllm.cancel.reason": str(payload.get("reason") or ""),
            "nrllm.cancel.termination_reason": str(payload.get("termination_reason") or "cancelled"),
        }
        if payload.get("by"):
            found["nrllm.cancel.by"] = str(payload["by"])
        return found

    def _as_cancelled(self, span: Any) -> None:
        span.set_attribute("error.type", "cancelled")
        span.set_attributes(self._cancel_attributes())
        span.set_status(Status(StatusCode.ERROR, f"cancelled ({(self.cancel or {}).get('source') or 'unknown'})"))

    def _close_open(self, why: str) -> None:
        opened, self._open = self._open, None
        if opened is not None:
            otel_context.detach(opened.token)
            opened.span.set_attribute("error.type", why)
            opened.span.set_status(Status(StatusCode.ERROR, why))
            opened.span.end()

    def _end_spawned(self, outcome: str) -> None:
        """End the sub-agent calls' spans: the call goes on in its child run when the segment
        suspended for it, and ends here in error when the suspension did not happen."""
        spawned, self._spawned = self._spawned, {}
        for span, child in spawned.values():
            if outcome == "awaiting_children":
                span.set_attribute(SUB_AGENT_RUN, child)
            elif outcome == "cancelled":
                self._as_cancelled(span)
            else:
                why = _CUT_SHORT.get(outcome, outcome)
                span.set_attribute("error.type", why)
                span.set_status(Status(StatusCode.ERROR, why))
            span.end()

    def end(self, result: Any, error: BaseException | None = None) -> None:
        """The segment is over (``result``: what the ladder returned, or ``None`` when it raised
        ``error``): end every span it still holds, the segment's own last."""
        try:
            outcome = str(getattr(getattr(result, "outcome", None), "value", "") or "error")
            if outcome == "cancelled" and self.cancel is None:  # acknowledged elsewhere (the reaper)
                self.cancelled(_cancel_of(self.run_id))
            self._close_open(_CUT_SHORT.get(outcome, outcome))
            self._end_spawned(outcome)
            if self._interrupted is not None:
                span, end = self._interrupted
                self._interrupted = None
                if outcome == "cancelled":
                    self._as_cancelled(span)
                span.end(end_time=end)
            attributes: dict[str, Any] = {
                "gen_ai.usage.input_tokens": self.usage.prompt_tokens,
                "gen_ai.usage.output_tokens": self.usage.completion_tokens,
                "nrllm.run.outcome": outcome,
            }
            attributes.update(self._cost(self.usage))
            for key, name in (("status", "nrllm.run.status"), ("termination_reason", "nrllm.run.termination_reason")):
                if getattr(result, key, ""):
                    attributes[name] = str(getattr(result, key))
            self.span.set_attributes(attributes)
            if outcome == "awaiting_approval":  # it waits for a person: the interrupt, and what for
                self.span.add_event(INTERRUPT_EVENT, interrupt_attributes(self.run_id))
            if outcome == "cancelled":
                self._as_cancelled(self.span)
            elif error is not None or outcome in _FAILED_OUTCOMES:
                if error is not None:
                    kind = type(error).__name__
                elif outcome == "failed":
                    kind = str(getattr(result, "termination_reason", "") or "failed")
                else:
                    kind = outcome
                self.span.set_attribute("error.type", kind)
                self.span.set_status(Status(StatusCode.ERROR, kind))
        except Exception:
            logger.exception("run %s: its segment's span could not be completed", self.run_id)
        finally:
            self.span.end()
            otel_context.detach(self.token)


def _cancel_of(run_id: str) -> dict[str, Any]:
    """Who cancelled the run, from where and why, read from its row (when another segment or
    the reaper acknowledged the cancel, this one holds no ``cancelled`` step of its own)."""
    row: Mapping[str, Any] = (
        AgentRun.objects.filter(pk=run_id)
        .values("cancelled_by_name", "cancel_source", "cancel_reason", "cancel_requested_at", "termination_reason")
        .first()
        or {}
    )
    return {
        "by": row.get("cancelled_by_name") or None,
        "source": row.get("cancel_source") or "",
        "reason": row.get("cancel_reason") or "",
        "requested_at": row.get("cancel_requested_at"),
        "termination_reason": row.get("termination_reason") or "cancelled",
    }


__all__ = ["ANSWERED_EVENT", "CANCEL_EVENT", "SUB_AGENT_RUN", "SegmentSpans", "begin", "provider_name"]
