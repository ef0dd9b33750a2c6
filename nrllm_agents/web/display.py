"""How a step reads on the run page when the server renders it (no JavaScript).

``static/nrllm_agents/playground.js`` (``stepDetails``) renders live steps the same way;
keep the two in step.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from django.utils import timezone

MAX_CHARS = 2000  # a long tool result or message is shown truncated; the stored step keeps it all


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


def _cut(text: str) -> str:
    return text if len(text) <= MAX_CHARS else text[:MAX_CHARS] + " …"


def call_text(call: dict[str, Any]) -> str:
    """``name({arguments as JSON})``."""
    return f"{call.get('name')}({_json(call.get('arguments') or {})})"


def _message(message: dict[str, Any]) -> str:
    content = message.get("content")
    return f"{message.get('role')}: {content if isinstance(content, str) else _json(content)}"


def who_cancelled(by: str | None, source: str | None) -> str:
    """The user who cancelled; ``the system`` for a limit's cancel; else ``unknown``."""
    return by or ("the system" if source == "system" else "unknown")


def time_of(iso: str | None) -> str:
    """``HH:MM:SS`` of a stored ISO timestamp (UTC), or an empty string."""
    return iso[11:19] if iso and len(iso) >= 19 else ""


def step_details(step: dict[str, Any]) -> list[tuple[str, str]]:
    """The labelled lines shown under a step's heading."""
    kind, p = step["kind"], step.get("payload") or {}
    lines: list[tuple[str, str]] = []
    if kind == "request":
        lines.append(("to", f"{p.get('provider')} · {p.get('model')}"))
        for message in p.get("messages") or []:
            lines.append(("sent", _message(message)))
        lines.append(("tools", ", ".join(p.get("tools") or []) or "none"))
    elif kind == "llm":
        if p.get("interrupted"):
            lines.append(("interrupted", "cut short by the cancel; the answer so far:"))
        if p.get("content"):
            lines.append(("answer", p["content"]))
        for call in p.get("tool_calls") or []:
            lines.append(("tool call", call_text(call)))
        usage = p.get("usage") or {}
        estimated = " (estimated)" if p.get("usage_estimated") else ""
        lines.append(
            (
                "tokens",
                f"{usage.get('prompt_tokens', 0)} prompt + {usage.get('completion_tokens', 0)} "
                f"completion = {usage.get('total_tokens', 0)}{estimated}",
            )
        )
    elif kind == "tool":
        lines.append(("call", call_text(p)))
        if p.get("interrupted"):
            lines.append(("interrupted", "cut short by the cancel: no result"))
        elif p.get("error") is not None:
            lines.append(("error", str(p["error"])))
        else:
            lines.append(("result", _json(p.get("result"))))
    elif kind == "approval":
        verdict = "approved" if p.get("approved") else "denied"
        lines.append(("decision", f"{verdict} by {p.get('by') or 'unknown'}"))
        for call in p.get("calls") or []:
            lines.append(("call", call_text(call)))
    elif kind == "cancelled":
        source = p.get("source")
        lines.append(("cancelled by", f"{who_cancelled(p.get('by'), source)} via {source or 'unknown'}"))
        lines.append(("requested at", str(p.get("requested_at") or "")))
        if p.get("reason"):
            lines.append(("reason", p["reason"]))
        limit = p.get("limit")
        if limit:
            lines.append(
                (
                    "limit",
                    f"{limit.get('limit')} {limit.get('value')}: measured {limit.get('measured')} {limit.get('unit')}",
                )
            )
        boundary = p.get("boundary_sequence")
        if p.get("interrupted"):
            lines.append(("stopped", f"interrupting step #{p.get('interrupted_sequence')} in flight"))
        else:
            lines.append(("stopped", "before any step" if boundary is None else f"after step #{boundary}"))
    elif kind == "forked":
        lines.append(("forked from", f"run {p.get('parent_id')} at step #{p.get('from_sequence')}"))
        lines.append(("copied", f"{len(p.get('messages') or [])} messages"))
        for answer in p.get("repaired") or []:
            lines.append(("answered", f"{answer.get('call_id')}: {answer.get('content')}"))
    else:
        lines.append(("payload", _json(p)))
    return [(label, _cut(text)) for label, text in lines]


def elapsed(started_at: datetime | None, finished_at: datetime | None) -> str:
    """``12.3 s`` from start to finish (or to now while the run goes on); ``—`` before it starts."""
    if started_at is None:
        return "—"
    seconds = ((finished_at or timezone.now()) - started_at).total_seconds()
    return f"{max(seconds, 0):.1f} s"


def for_page(step: dict[str, Any]) -> dict[str, Any]:
    """A ``presenters.step_dict`` with what the template shows."""
    return {
        **step,
        "details": step_details(step),
        "time": time_of(step.get("created_at")),
        "interrupted": bool((step.get("payload") or {}).get("interrupted")),
    }
