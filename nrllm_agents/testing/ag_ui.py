"""Reading an AG-UI stream back, and checking it against the run's stored steps: what the AG-UI
tests and ``bench/ag_ui_reattach.py`` share."""

from __future__ import annotations

import json
from typing import Any

from ..models import AgentRun

Received = list[tuple[str | None, dict[str, Any]]]


def parse(body: str) -> Received:
    """The ``(id, event)`` pairs of an SSE body (comments skipped)."""
    out: Received = []
    for block in body.split("\n\n"):
        lines = [line for line in block.splitlines() if line and not line.startswith(":")]
        if lines:
            ids = [line[4:] for line in lines if line.startswith("id: ")]
            data = "".join(line[6:] for line in lines if line.startswith("data: "))
            out.append((ids[0] if ids else None, json.loads(data)))
    return out


def from_snapshot(messages: list[dict[str, Any]]) -> Received:
    """A ``MESSAGES_SNAPSHOT``'s messages as the events that would have built them."""
    out: Received = []
    for m in messages:
        if m["role"] == "assistant" and m.get("content"):
            out.append((None, {"type": "TEXT_MESSAGE_CONTENT", "messageId": m["id"], "delta": m["content"]}))
        for call in m.get("toolCalls") or []:
            out.append((None, {"type": "TOOL_CALL_START", "toolCallId": call["id"]}))
        if m["role"] == "tool":
            out.append((None, {"type": "TOOL_CALL_RESULT", "toolCallId": m["toolCallId"]}))
    return out


def problems(events: Received, run: AgentRun) -> list[str]:
    """What ``events`` lost or repeated against the run's stored steps: the text of each message
    is its stored answer, each call and result comes once, no id twice, every step closed."""
    found: list[str] = []
    ids = [i for i, _ in events if i is not None]
    if len(ids) != len(set(ids)):
        found.append(f"ids repeated: {sorted({i for i in ids if ids.count(i) > 1})}")
    texts: dict[str, str] = {}
    for _, e in events:
        if e["type"] == "TEXT_MESSAGE_CONTENT":
            texts[e["messageId"]] = texts.get(e["messageId"], "") + e["delta"]
    steps = list(run.events.order_by("sequence"))
    answers = [s.payload["content"] for s in steps if s.kind == "llm" and s.payload.get("content")]
    if list(texts.values()) != answers:
        found.append(f"text {[len(t) for t in texts.values()]} against the stored {[len(a) for a in answers]}")
    calls = [c["id"] for s in steps if s.kind == "llm" for c in s.payload.get("tool_calls") or []]
    if [e["toolCallId"] for _, e in events if e["type"] == "TOOL_CALL_START"] != calls:
        found.append("tool calls")
    results = [s.payload["call_id"] for s in steps if s.kind == "tool"]
    if [e["toolCallId"] for _, e in events if e["type"] == "TOOL_CALL_RESULT"] != results:
        found.append("tool results")
    opened = sorted(e["stepName"] for _, e in events if e["type"] == "STEP_STARTED")
    if opened != sorted(e["stepName"] for _, e in events if e["type"] == "STEP_FINISHED"):
        found.append("steps not closed")
    return found
