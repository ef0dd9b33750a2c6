"""A run's step stream as compact, read-only timeline rows for the admin change page.

Rendering never fails on an unexpected payload: unknown kinds and odd shapes are shown as
(truncated) JSON. Values are plain text; the template escapes them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ..models import AgentRunEvent

MAX_CHARS = 400  # per rendered value; the full payload stays available through the API


@dataclass(frozen=True)
class TimelineRow:
    """One step, ready for the template: its header columns and ``(label, text)`` lines."""

    sequence: int
    kind: str
    round: int
    duration_ms: float | None
    created_at: datetime
    lines: list[tuple[str, str]]


def rows(events: Iterable[AgentRunEvent]) -> list[TimelineRow]:
    """The timeline rows for events, in the order given."""
    return [
        TimelineRow(e.sequence, e.kind, e.round, e.duration_ms, e.created_at, describe(e.kind, e.payload))
        for e in events
    ]


def clip(text: str, limit: int = MAX_CHARS) -> str:
    """``text`` cut to ``limit`` characters, saying how much was left out."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… (+{len(text) - limit} chars)"


def _json(value: Any) -> str:
    return clip(json.dumps(value, ensure_ascii=False, default=str, sort_keys=True))


def _text(value: Any) -> str:
    return clip(value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str))


def call_text(call: Any) -> str:
    """A tool call as ``name({...arguments})``."""
    if not isinstance(call, dict):
        return _json(call)
    arguments = call.get("arguments")
    # Sorted keys: PostgreSQL's jsonb does not keep the order the model gave.
    text = json.dumps(arguments or {}, ensure_ascii=False, default=str, sort_keys=True)
    return clip(f"{call.get('name', '?')}({text})")


def _calls(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _request(p: dict[str, Any]) -> list[tuple[str, str]]:
    lines = [("model", f"{p.get('provider', '?')} / {p.get('model') or '-'}")]
    messages = _calls(p.get("messages"))
    total = p.get("message_count", len(messages))
    lines.append(("messages", f"{total} sent, {len(messages)} new since the last step"))
    for m in messages:
        if not isinstance(m, dict):
            lines.append(("message", _json(m)))
            continue
        role = str(m.get("role", "?"))
        if role == "tool":
            role = f"tool result {m.get('tool_call_id', '')}".strip()
        if m.get("content") is not None:
            lines.append((role, _text(m["content"])))
        for call in _calls(m.get("tool_calls")):
            lines.append((f"{role} call", call_text(call)))
    tools = _calls(p.get("tools"))
    lines.append(("tools offered", ", ".join(map(str, tools)) or "none"))
    return lines


def _llm(p: dict[str, Any]) -> list[tuple[str, str]]:
    lines: list[tuple[str, str]] = []
    if p.get("content") is not None:
        lines.append(("content", _text(p["content"])))
    lines.extend(("tool call", call_text(c)) for c in _calls(p.get("tool_calls")))
    usage = p.get("usage")
    if isinstance(usage, dict):
        lines.append(
            (
                "usage",
                f"{usage.get('prompt_tokens', 0)} prompt + {usage.get('completion_tokens', 0)} "
                f"completion = {usage.get('total_tokens', '?')} tokens",
            )
        )
    if p.get("finish_reason"):
        lines.append(("finish", str(p["finish_reason"])))
    return lines


def _tool(p: dict[str, Any]) -> list[tuple[str, str]]:
    lines = [("call", call_text(p))]
    if p.get("error") is not None:
        lines.append(("error", _text(p["error"])))
    else:
        lines.append(("result", _json(p.get("result"))))
    return lines


def _approval(p: dict[str, Any]) -> list[tuple[str, str]]:
    decision = "approved" if p.get("approved") else "denied"
    if p.get("by"):
        decision += f" by {p['by']}"
    return [("decision", decision), *(("call", call_text(c)) for c in _calls(p.get("calls")))]


def _cancelled(p: dict[str, Any]) -> list[tuple[str, str]]:
    by = p.get("by") or ("the system" if p.get("source") == "system" else "unknown user")
    lines = [("cancelled", f"by {by} via {p.get('source') or 'unknown source'}")]
    if p.get("reason"):
        lines.append(("reason", _text(p["reason"])))
    if p.get("requested_at"):
        lines.append(("requested at", str(p["requested_at"])))
    limit = p.get("limit")
    if isinstance(limit, dict):
        lines.append(
            (
                "limit",
                f"{limit.get('limit')} {limit.get('value')}: measured {limit.get('measured')} "
                f"{limit.get('unit', '')}".strip(),
            )
        )
    boundary = p.get("boundary_sequence")
    lines.append(("stopped", f"after step #{boundary}" if boundary is not None else "before any step ran"))
    return lines


def _forked(p: dict[str, Any]) -> list[tuple[str, str]]:
    origin = f"run {p.get('parent_id')} at step #{p.get('from_sequence')} ({p.get('parent_status')})"
    lines = [
        ("forked from", origin),
        ("copied", f"{len(_calls(p.get('messages')))} messages from {p.get('copied_steps')} steps"),
    ]
    lines.extend(
        ("answered", f"{r.get('call_id')}: {_text(r.get('content'))}")
        for r in _calls(p.get("repaired"))
        if isinstance(r, dict)
    )
    return lines


_DESCRIBERS = {
    "request": _request,
    "llm": _llm,
    "tool": _tool,
    "approval": _approval,
    "cancelled": _cancelled,
    "forked": _forked,
}


def describe(kind: str, payload: Any) -> list[tuple[str, str]]:
    """``(label, text)`` lines summarising one step's payload."""
    describer = _DESCRIBERS.get(kind)
    if describer is None or not isinstance(payload, dict):
        return [("payload", _json(payload))]
    return describer(payload)
