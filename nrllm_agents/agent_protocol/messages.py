"""Messages between our transcript (OpenAI-shaped dicts) and the protocol's (LangChain's
serialised messages: ``type`` human / ai / tool / system), and the input a client sends.

A message's ``id`` is derived from where it sits (its thread and its index in the
transcript), so the same message has the same id in every state, history entry and stream.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from typing import Any

from ..validation.run_request import InvalidRequest

NAMESPACE = uuid.UUID("8a6f4a52-6f8e-4f43-9e8f-3b8f6c1d2e77")
ROLES = {"user": "human", "human": "human", "assistant": "ai", "ai": "ai", "tool": "tool", "system": "system"}


def message_id(scope: Any, index: int) -> str:
    """The stable id of the ``index``-th message of a thread (or a run) ``scope``."""
    return str(uuid.uuid5(NAMESPACE, f"{scope}:{index}"))


def tool_calls(calls: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Our ``{"id", "name", "arguments"}`` calls as LangChain's ``tool_calls``."""
    return [
        {"name": c.get("name"), "args": dict(c.get("arguments") or {}), "id": c.get("id"), "type": "tool_call"}
        for c in calls
    ]


def ai_message(
    content: str, msg_id: str, calls: Iterable[Mapping[str, Any]] = (), *, chunk: bool = False
) -> dict[str, Any]:
    """An ``ai`` message (or ``AIMessageChunk``, a piece of one as it is written)."""
    return {
        "type": "AIMessageChunk" if chunk else "ai",
        "content": content,
        "id": msg_id,
        "name": None,
        "additional_kwargs": {},
        "response_metadata": {},
        "tool_calls": tool_calls(calls),
        "invalid_tool_calls": [],
        "usage_metadata": None,
    }


def to_protocol(message: Mapping[str, Any], msg_id: str) -> dict[str, Any]:
    """One of our transcript's messages as a LangChain message dict."""
    kind = ROLES.get(str(message.get("role")), "human")
    content = message.get("content")
    text = content if isinstance(content, str) else ("" if content is None else str(content))
    if kind == "ai":
        return ai_message(text, msg_id, message.get("tool_calls") or ())
    body: dict[str, Any] = {
        "type": kind,
        "content": text,
        "id": msg_id,
        "name": None,
        "additional_kwargs": {},
        "response_metadata": {},
    }
    if kind == "tool":
        body.update(tool_call_id=message.get("tool_call_id"), status="success", artifact=None)
    return body


def transcript(messages: Iterable[Mapping[str, Any]], scope: Any) -> list[dict[str, Any]]:
    """A whole transcript as protocol messages, with their stable ids."""
    return [to_protocol(m, message_id(scope, i)) for i, m in enumerate(messages)]


def _text(content: Any) -> str | None:
    """A message's text: a string, or the ``text`` of its content blocks."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [b.get("text") for b in content if isinstance(b, dict) and b.get("type") == "text"]
        if all(isinstance(p, str) for p in parts) and parts:
            return "\n".join(parts)  # type: ignore[arg-type]
    return None


def prompt_of(value: Any) -> tuple[str, str | None]:
    """The prompt (the human messages' text) and the system prompt of an ``input``.

    Raises ``InvalidRequest`` (a 422) for anything else than ``{"messages": [...]}`` of human
    and system messages with text content (a message is ``{"role"|"type", "content"}``, or a
    bare string).
    """
    if not isinstance(value, Mapping) or set(value) - {"messages"} or not isinstance(value.get("messages"), list):
        raise InvalidRequest({"input": 'expected {"messages": [...]}'})
    prompts: list[str] = []
    system: list[str] = []
    for i, message in enumerate(value["messages"]):
        if isinstance(message, str):
            message = {"type": "human", "content": message}
        if not isinstance(message, Mapping):
            raise InvalidRequest({f"input.messages[{i}]": "expected a message object"})
        kind = ROLES.get(str(message.get("type") or message.get("role")))
        text = _text(message.get("content"))
        if kind not in ("human", "system") or text is None:
            raise InvalidRequest({f"input.messages[{i}]": "a human or system message with text content"})
        (prompts if kind == "human" else system).append(text)
    if not prompts or not "".join(prompts).strip():
        raise InvalidRequest({"input.messages": "at least one human message with text"})
    return "\n\n".join(prompts), ("\n\n".join(system) or None)
