"""How a step reads, for people: the one describer every surface uses.

A step (``presenters.step_dict`` shape) is described two ways from the same phrases:

- ``lines(kind, payload)``: labelled ``(label, text)`` lines, for the admin timeline and the
  playground (server-rendered, and live: the browser stream ships them with each step, so the
  page's JavaScript describes nothing itself);
- ``headline(step)``: one line, for the commands' human output.

Describing never fails: unknown kinds and odd payload shapes are shown as (clipped) JSON.
Values are plain text; every renderer escapes them. JSON is written with sorted keys, since
PostgreSQL's ``jsonb`` does not keep the order the model gave, so a step reads the same live and
after a reload, on either database.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime
from typing import Any

from django.utils import timezone

PAGE_CHARS = 2000  # per value on the playground; the stored step keeps it all
TIMELINE_CHARS = 400  # per value on the admin page, which shows up to hundreds of steps
HEADLINE_CHARS = 100  # per value in a command's one-line step

Lines = list[tuple[str, str]]


def clip(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, saying how much was left out."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… (+{len(text) - limit} chars)"


def to_json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str, sort_keys=True)


def _text(value: Any) -> str:
    return value if isinstance(value, str) else to_json(value)


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


# --- the phrases -------------------------------------------------------------------------------
def call_text(call: Any) -> str:
    """A tool call as ``name({...arguments})``."""
    if not isinstance(call, dict):
        return to_json(call)
    return f"{call.get('name', '?')}({to_json(call.get('arguments') or {})})"


def usage_text(payload: dict[str, Any]) -> str:
    usage = _dict(payload.get("usage"))
    prompt, completion = usage.get("prompt_tokens", 0), usage.get("completion_tokens", 0)
    total = usage.get("total_tokens", "?")
    estimated = " (estimated)" if payload.get("usage_estimated") else ""
    return f"{prompt} prompt + {completion} completion = {total} tokens{estimated}"


def cost_text(payload: dict[str, Any]) -> str | None:
    """A model call's cost and the price it was costed at, or ``None`` for an unpriced call."""
    usage, price = _dict(payload.get("usage")), _dict(payload.get("price"))
    if usage.get("cost") is None:
        return None
    currency = price.get("currency") or ""
    estimated = ", from estimated tokens" if usage.get("cost_estimated") else ""
    rate = f"{price.get('input_per_million')} in / {price.get('output_per_million')} out per 1M tokens"
    where = f", {price['source']}" if price.get("source") else ""
    return f"{usage['cost']} {currency} at {rate}{where}{estimated}"


def _moment(iso: Any) -> datetime | None:
    try:
        return datetime.fromisoformat(str(iso))
    except ValueError:
        return None


def clock(iso: Any) -> str:
    """A stored ISO timestamp as ``20:33:10.936 CET``, in ``TIME_ZONE`` like every absolute time
    (milliseconds: a cancel's request and its stop are often a few apart); anything else as given."""
    moment = _moment(iso)
    if moment is None:
        return str(iso)
    if timezone.is_aware(moment):
        moment = timezone.localtime(moment)
    return f"{moment:%H:%M:%S}.{moment.microsecond // 1000:03d} {moment.tzname() or ''}".rstrip()


def later(start_iso: Any, end_iso: Any) -> str | None:
    """``12 ms later`` / ``1.4 s later`` from one ISO timestamp to another; ``None`` if unreadable."""
    start, end = _moment(start_iso), _moment(end_iso)
    if start is None or end is None:
        return None
    seconds = max((end - start).total_seconds(), 0.0)
    return f"{seconds * 1000:.0f} ms later" if seconds < 1 else f"{seconds:.2f} s later"


def who_cancelled(payload: dict[str, Any]) -> str:
    """``by alice via api``; ``by the system`` for a limit's cancel."""
    source = payload.get("source")
    if source == "system" and not payload.get("by"):
        return "by the system"
    return f"by {payload.get('by') or 'an unknown user'} via {source or 'an unknown source'}"


def stop_text(payload: dict[str, Any]) -> str:
    """Where a cancelled run stopped: the step it interrupted, or the boundary it stopped at."""
    if payload.get("interrupted"):
        return f"interrupting step #{payload.get('interrupted_sequence')} in flight"
    boundary = payload.get("boundary_sequence")
    return "before any step ran" if boundary is None else f"after step #{boundary}"


def limit_text(limit: dict[str, Any]) -> str:
    return (
        f"{limit.get('limit')} {limit.get('value')}: measured {limit.get('measured')} {limit.get('unit', '')}".strip()
    )


def fork_origin(payload: dict[str, Any]) -> str:
    origin = f"run {payload.get('parent_id')} at step #{payload.get('from_sequence')}"
    return f"{origin} ({payload['parent_status']})" if payload.get("parent_status") else origin


def cancel_text(cancel: dict[str, Any]) -> str:
    """A run's cancel in one sentence, from ``presenters.run_status_dict(run)["cancel"]``."""
    text = f"Cancelled {who_cancelled(cancel)} at {clock(cancel.get('requested_at'))}"
    if cancel.get("stopped_at"):
        gap = later(cancel.get("requested_at"), cancel["stopped_at"])
        text += f"; stopped {gap}." if gap else f"; stopped at {clock(cancel['stopped_at'])}."
    else:
        text += "."
    return f"{text} {cancel.get('reason')}." if cancel.get("limit") else text


INTERRUPTED_ANSWER = "cut short by the cancel; the answer so far:"
INTERRUPTED_TOOL = "cut short by the cancel: no result"


# --- labelled lines ----------------------------------------------------------------------------
def _request(p: dict[str, Any]) -> Lines:
    messages = _list(p.get("messages"))
    lines = [
        ("model", f"{p.get('provider', '?')} / {p.get('model') or '-'}"),
        ("messages", f"{p.get('message_count', len(messages))} sent, {len(messages)} new since the last step"),
    ]
    for m in messages:
        if not isinstance(m, dict):
            lines.append(("message", to_json(m)))
            continue
        role = str(m.get("role", "?"))
        if role == "tool":
            role = f"tool result {m.get('tool_call_id', '')}".strip()
        if m.get("content") is not None:
            lines.append((role, _text(m["content"])))
        lines.extend((f"{role} call", call_text(call)) for call in _list(m.get("tool_calls")))
    lines.append(("tools offered", ", ".join(map(str, _list(p.get("tools")))) or "none"))
    return lines


def _llm(p: dict[str, Any]) -> Lines:
    if p.get("failed"):
        return [("error", _text(p.get("error")))]
    lines: Lines = [("interrupted", INTERRUPTED_ANSWER)] if p.get("interrupted") else []
    if p.get("content") is not None:
        lines.append(("content", _text(p["content"])))
    lines.extend(("tool call", call_text(c)) for c in _list(p.get("tool_calls")))
    if isinstance(p.get("usage"), dict):
        lines.append(("usage", usage_text(p)))
    cost = cost_text(p)
    if cost is not None:
        lines.append(("cost", cost))
    if p.get("error") is not None:
        lines.append(("error", _text(p["error"])))
    if p.get("finish_reason"):
        lines.append(("finish", str(p["finish_reason"])))
    return lines


def progress_text(progress: Any) -> str:
    """The last progress an MCP server reported for a call: ``3/30 step 3 of 30`` (or empty)."""
    last = _dict(_list(progress)[-1]) if _list(progress) else {}
    if not last:
        return ""
    total = f" / {_number(last['total'])}" if last.get("total") is not None else ""
    message = f" {last['message']}" if last.get("message") else ""
    return short(f"{_number(last.get('progress'))}{total}{message}")


def _number(value: Any) -> str:
    return f"{value:g}" if isinstance(value, (int, float)) and not isinstance(value, bool) else str(value)


def _tool(p: dict[str, Any]) -> Lines:
    if p.get("interrupted"):
        seen = progress_text(p.get("progress"))
        told = _text(_dict(p.get("mcp")).get("cancelled_at") or "")
        return (
            [("call", call_text(p)), ("interrupted", INTERRUPTED_TOOL)]
            + ([("progress", seen)] if seen else [])
            + ([("MCP server told", told)] if told else [])
        )
    if p.get("error") is not None:
        return [("call", call_text(p)), ("error", _text(p["error"]))]
    return [("call", call_text(p)), ("result", to_json(p.get("result")))]


def decision_text(payload: dict[str, Any]) -> str:
    """``approved by alice`` / ``denied``."""
    return ("approved" if payload.get("approved") else "denied") + (f" by {payload['by']}" if payload.get("by") else "")


def _approval(p: dict[str, Any]) -> Lines:
    why: Lines = [("reason", _text(p["reason"]))] if p.get("reason") else []
    return [("decision", decision_text(p)), *why, *(("call", call_text(c)) for c in _list(p.get("calls")))]


def _cancelled(p: dict[str, Any]) -> Lines:
    lines = [("cancelled", who_cancelled(p))]
    if p.get("reason"):
        lines.append(("reason", _text(p["reason"])))
    if p.get("requested_at"):
        lines.append(("requested at", clock(p["requested_at"])))
    if isinstance(p.get("limit"), dict):
        lines.append(("limit", limit_text(p["limit"])))
    lines.append(("stopped", stop_text(p)))
    return lines


def _forked(p: dict[str, Any]) -> Lines:
    lines = [
        ("forked from", fork_origin(p)),
        ("copied", f"{len(_list(p.get('messages')))} messages from {p.get('copied_steps', '?')} steps"),
    ]
    lines.extend(
        ("answered", f"{r.get('call_id')}: {_text(r.get('content'))}")
        for r in _list(p.get("repaired"))
        if isinstance(r, dict)
    )
    return lines


def _thread(p: dict[str, Any]) -> Lines:
    messages = _list(p.get("messages"))
    last = messages[-1] if messages and isinstance(messages[-1], dict) else {}
    return [
        ("thread", f"{p.get('thread_id')} message #{p.get('position')}"),
        ("continues", f"run {p.get('after_run')}" if p.get("after_run") else "nothing (the first turn)"),
        ("copied", f"{p.get('copied_messages', 0)} messages"),
        *(
            [("purged", f"{p['purged_turns']} earlier turns' content purged: starts from what is left")]
            if p.get("purged_turns")
            else []
        ),
        ("message", _text(last.get("content"))),
    ]


_LINES: dict[str, Callable[[dict[str, Any]], Lines]] = {
    "request": _request,
    "llm": _llm,
    "tool": _tool,
    "approval": _approval,
    "cancelled": _cancelled,
    "forked": _forked,
    "thread": _thread,
}


PURGED = "content purged by the retention policy"


def is_purged(kind: str, payload: Any) -> bool:
    """A step whose content the retention policy purged (its ``cancelled`` step reads as ever)."""
    return kind != "cancelled" and isinstance(payload, dict) and payload.get("purged") is True


def _purged(p: dict[str, Any]) -> Lines:
    """What is left of a purged step: the tool's name, the spend, whether a cancel cut it short."""
    rows: Lines = [("purged", PURGED)]
    if p.get("name"):
        rows.append(("tool", _text(p["name"])))
    if "usage" in p:
        rows.append(("usage", usage_text(p)))
        cost = cost_text(p)
        if cost:
            rows.append(("cost", cost))
    if p.get("interrupted"):
        rows.append(("interrupted", "cut short by the cancel"))
    return rows


def lines(kind: str, payload: Any, *, limit: int = PAGE_CHARS) -> Lines:
    """``(label, text)`` lines describing one step, each value clipped to ``limit`` characters."""
    if is_purged(kind, payload):
        return [(label, clip(text, limit)) for label, text in _purged(payload)]
    describer = _LINES.get(kind)
    if describer is None or not isinstance(payload, dict):
        return [("payload", clip(to_json(payload), limit))]
    return [(label, clip(text, limit)) for label, text in describer(payload)]


# --- one line ------------------------------------------------------------------------------------
def short(value: Any, limit: int = HEADLINE_CHARS) -> str:
    """``value`` as one line (whitespace collapsed, JSON for non-text), clipped to ``limit``."""
    return clip(" ".join(_text(value).split()), limit)


def _calls(calls: Any) -> str:
    return ", ".join(short(call_text(c)) for c in _list(calls))


def _tokens(p: dict[str, Any]) -> str:
    usage = _dict(p.get("usage"))
    if not (usage.get("total_tokens") or p.get("interrupted")):
        return ""
    estimated = "~" if p.get("usage_estimated") else ""
    cost = f", {estimated}{usage['cost']} {_dict(p.get('price')).get('currency', '')}" if usage.get("cost") else ""
    return f" [{estimated}{usage.get('prompt_tokens', 0)}+{usage.get('completion_tokens', 0)} tokens{cost}]"


def _headline_text(kind: str, p: dict[str, Any]) -> str:
    if is_purged(kind, p):
        interrupted = " INTERRUPTED" if p.get("interrupted") else ""
        return f"({PURGED}){interrupted}{_tokens(p)}"
    if kind == "request":
        count = p.get("message_count")
        return f"to {p.get('provider')}/{p.get('model')} ({count} message{'' if count == 1 else 's'})"
    if kind == "llm":
        if p.get("failed"):
            return f"FAILED: {short(p.get('error'))}"
        if p.get("interrupted"):
            text = f"INTERRUPTED, {INTERRUPTED_ANSWER} {short(p.get('content') or '')}"
        elif p.get("tool_calls"):
            text = f"asks for {_calls(p['tool_calls'])}"
        else:
            text = f"answers: {short(p.get('content') or '')}"
        return text + _tokens(p)
    if kind == "tool":
        if p.get("interrupted"):
            return f"{short(call_text(p))} INTERRUPTED, {INTERRUPTED_TOOL}"
        if p.get("error") is not None:
            return f"{p.get('name')} failed: {short(p['error'])}"
        return f"{short(call_text(p))} -> {short(p.get('result'))}"
    if kind == "approval":
        return f"{decision_text(p)}: {_calls(p.get('calls'))}"
    if kind == "cancelled":
        reason = f", reason: {short(p['reason'])}" if p.get("reason") else ""
        return f"{who_cancelled(p)}{reason}; stopped {stop_text(p)}"
    if kind == "forked":
        copied, answered = len(_list(p.get("messages"))), len(_list(p.get("repaired")))
        return f"from {fork_origin(p)}: {copied} messages copied, {answered} unanswered calls answered"
    if kind == "thread":
        after = f"continues run {p.get('after_run')}" if p.get("after_run") else "first turn"
        copied = p.get("copied_messages", 0)
        purged = f", {p['purged_turns']} earlier turns purged" if p.get("purged_turns") else ""
        return f"message #{p.get('position')} of thread {p.get('thread_id')} ({after}, {copied} messages{purged})"
    return short(p)


def headline(step: dict[str, Any]) -> str:
    """One human line for a step: ``#3   llm  r1  answers: … [42+18 tokens]  (12 ms)``."""
    kind, payload = str(step.get("kind")), step.get("payload")
    text = _headline_text(kind, payload) if isinstance(payload, dict) else short(payload)
    duration = step.get("duration_ms")
    suffix = f"  ({duration:.0f} ms)" if isinstance(duration, (int, float)) else ""
    return f"  #{step.get('sequence')!s:<3} {kind:<9} r{step.get('round')}  {text}{suffix}"
