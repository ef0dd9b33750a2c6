"""Wire helpers every provider shares: lenient field access, tool arguments, tool declarations.

Plain Python: no SDK. Each provider converts our transcript (tool calls as ``{"id", "name",
"arguments": dict}``, tool results as ``{"role": "tool", "tool_call_id", "content"}``) to its
vendor's shape with these.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from ..steps import Usage

# the key of a keyless connection: local servers (Ollama, llama.cpp) ignore it; here rather than in
# openai_compat so that code choosing a key does not import the openai SDK
PLACEHOLDER_API_KEY = "not-needed"


def field(obj: Any, name: str) -> Any:
    """A field of an SDK model or of a plain dict; ``None`` when absent."""
    if isinstance(obj, dict):
        return obj.get(name)
    return getattr(obj, name, None)


def parse_arguments(raw: Any) -> dict[str, Any]:
    """Tool-call arguments as a dict.

    An empty string means no arguments. Anything that is not a JSON object becomes
    ``{"_raw": <string>}`` so the tool rejects it with a ``ToolError`` the model can
    read, instead of the run crashing.
    """
    if isinstance(raw, dict):
        return raw
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return {}
    text = raw if isinstance(raw, str) else str(raw)
    try:
        value = json.loads(text)
    except ValueError:
        return {"_raw": text}
    return value if isinstance(value, dict) else {"_raw": text}


def call_arguments(call: dict[str, Any]) -> dict[str, Any]:
    """The arguments of one of our transcript's tool calls (or an OpenAI wire call) as a dict."""
    function = call.get("function")
    raw = function.get("arguments") if isinstance(function, dict) else call.get("arguments")
    return parse_arguments(raw)


def call_name(call: dict[str, Any]) -> str:
    function = call.get("function")
    return str(function.get("name") if isinstance(function, dict) else call.get("name"))


def declarations(tools: Sequence[dict[str, Any]]) -> list[tuple[str, str, dict[str, Any]]]:
    """``(name, description, JSON schema of the parameters)`` of each tool schema offered.

    Takes the chat-completions entries the loop builds (``{"type": "function", "function":
    {...}}``) and bare ``{"name", "description", "parameters"}`` alike.
    """
    out = []
    for tool in tools:
        inner = tool.get("function")
        spec: dict[str, Any] = inner if isinstance(inner, dict) else dict(tool)
        parameters = spec.get("parameters") or {"type": "object", "properties": {}}
        out.append((str(spec.get("name")), str(spec.get("description") or ""), dict(parameters)))
    return out


def text_of(content: Any) -> str:
    """A message's content as text (lists of parts joined, ``None`` empty)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(field(p, "text") or "") if not isinstance(p, str) else p for p in content)
    return str(content)


def estimate_usage(messages: Sequence[dict[str, Any]], arrived_chars: int) -> Usage:
    """About four characters a token: what was sent, and what arrived."""
    sent = len(json.dumps(list(messages), default=str, ensure_ascii=False))
    return Usage(-(-sent // 4), -(-arrived_chars // 4))
