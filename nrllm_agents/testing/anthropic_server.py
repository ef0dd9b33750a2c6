"""A real HTTP server on loopback that speaks Anthropic's Messages API (``POST /v1/messages``).

A test double shipped with the product, scripted like ``chat_server`` (the same entries and
``by_turn``). Point ``AnthropicProvider`` (or the ``anthropic`` SDK) at ``server.base_url``. It
streams Anthropic's server-sent events when asked (``streams`` logs what was sent and when the
client went away), refuses with HTTP 400 what the real API refuses (no ``max_tokens``, an
unanswered ``tool_use``), with 401 a request without the key when ``api_key`` is set, and answers
errors in Anthropic's shape.

The wire details: docs/internals.md ("The Anthropic server"). For manual demos:
``python -m nrllm_agents.testing.anthropic_server --port 8766``.
"""

from __future__ import annotations

import json
from typing import Any

from .chat_server import ChatCompletionServer, serve

MESSAGES_PATH = "/v1/messages"
_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}


def transcript_problem(messages: Any) -> str | None:
    """Why the Messages API refuses ``messages``, or ``None`` when it accepts them."""
    if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
        return "messages: a non-empty list of message objects is required"
    if messages[0].get("role") != "user":
        return "messages: the first message must use the 'user' role"
    pending: set[str] = set()
    for i, message in enumerate(messages):
        role, content = message.get("role"), message.get("content")
        if role not in ("user", "assistant"):
            return f"messages.{i}.role: Input should be 'user' or 'assistant'"
        blocks = content if isinstance(content, list) else [{"type": "text", "text": content}]
        if not blocks:
            return f"messages.{i}: content must not be empty"
        results = {str(b.get("tool_use_id")) for b in blocks if isinstance(b, dict) and b.get("type") == "tool_result"}
        if role == "user" and (pending or results):
            if results - pending:
                return (
                    f"messages.{i}: unexpected `tool_use_id` found in `tool_result` blocks: {sorted(results - pending)}"
                )
            if pending - results:
                return (
                    f"messages.{i}: `tool_use` ids were found without `tool_result` blocks immediately after: "
                    f"{', '.join(sorted(pending - results))}"
                )
        elif role == "assistant" and pending:
            return f"messages.{i}: the tool_use blocks of the previous turn have no tool_result"
        pending = set()
        for block in blocks:
            if not isinstance(block, dict):
                return f"messages.{i}.content: each block must be an object"
            if block.get("type") == "text" and not (isinstance(block.get("text"), str) and block["text"]):
                return f"messages.{i}.content: text content blocks must be non-empty"
            if block.get("type") == "tool_use" and role == "assistant":
                pending.add(str(block.get("id")))
    if pending:
        return "the last assistant turn's tool_use blocks have no tool_result"
    return None


class AnthropicServer(ChatCompletionServer):
    """Serves scripted Messages API answers on ``127.0.0.1`` at an ephemeral port."""

    @property
    def base_url(self) -> str:
        """The root to hand the SDK (it appends ``/v1/messages``), e.g. ``http://127.0.0.1:54321``."""
        return super().base_url.removesuffix("/v1")

    def route(self, path: str, body: Any) -> bool | None:
        if path.split("?", 1)[0].rstrip("/") != MESSAGES_PATH:
            return None
        return isinstance(body, dict) and bool(body.get("stream"))

    def authorized(self, headers: Any) -> bool:
        if self.api_key is None:
            return True
        keyed = headers.get("x-api-key") == self.api_key
        return bool(keyed or headers.get("Authorization") == f"Bearer {self.api_key}")

    def error_body(self, message: str, status: int) -> dict[str, Any]:
        kind = _ERROR_TYPES.get(status, "api_error")
        return {"type": "error", "error": {"type": kind, "message": message}}

    def bound(self, body: dict[str, Any]) -> Any:
        return body.get("max_tokens")

    def problem(self, body: dict[str, Any]) -> str | None:
        if not isinstance(body.get("max_tokens"), int):
            return "max_tokens: Field required"
        return transcript_problem(body.get("messages"))

    def answer(self, entry: dict[str, Any], body: dict[str, Any]) -> dict[str, Any]:
        n = self._next_id()
        content: list[dict[str, Any]] = []
        if entry.get("content"):
            content.append({"type": "text", "text": entry["content"]})
        for i, call in enumerate(entry.get("tool_calls") or []):
            arguments = call.get("arguments") or {}
            if isinstance(arguments, str):
                arguments = json.loads(arguments)
            content.append(
                {
                    "type": "tool_use",
                    "id": str(call.get("id") or f"toolu_{n}_{i + 1}"),
                    "name": call["name"],
                    "input": arguments,
                }
            )
        prompt, completion, cut = self.usage(entry, body)
        stop = "tool_use" if entry.get("tool_calls") else ("max_tokens" if cut else "end_turn")
        return {
            "id": f"msg_{n}",
            "type": "message",
            "role": "assistant",
            "model": str(body.get("model") or "scripted"),
            "content": content,
            "stop_reason": stop,
            "stop_sequence": None,
            "usage": {"input_tokens": prompt, "output_tokens": completion},
        }

    def frames(self, entry: dict[str, Any], body: dict[str, Any]) -> list[tuple[bytes, str]]:
        whole = self.answer(entry, body)
        usage = whole["usage"]

        def event(data: dict[str, Any], text: str = "") -> tuple[bytes, str]:
            return f"event: {data['type']}\ndata: {json.dumps(data)}\n\n".encode(), text

        start = {
            **whole,
            "content": [],
            "stop_reason": None,
            "usage": {"input_tokens": usage["input_tokens"], "output_tokens": 1},
        }
        out = [event({"type": "message_start", "message": start})]
        for index, block in enumerate(whole["content"]):
            if block["type"] == "text":
                out.append(
                    event(
                        {"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}}
                    )
                )
                words = block["text"].split(" ")
                for i, word in enumerate(words):
                    piece = word + (" " if i < len(words) - 1 else "")
                    if piece:
                        delta = {"type": "text_delta", "text": piece}
                        out.append(event({"type": "content_block_delta", "index": index, "delta": delta}, piece))
            else:
                opening = {**block, "input": {}}
                out.append(event({"type": "content_block_start", "index": index, "content_block": opening}))
                arguments = json.dumps(block["input"])
                for cut in (arguments[: len(arguments) // 2], arguments[len(arguments) // 2 :]):
                    delta = {"type": "input_json_delta", "partial_json": cut}
                    out.append(event({"type": "content_block_delta", "index": index, "delta": delta}))
            out.append(event({"type": "content_block_stop", "index": index}))
        final = {"stop_reason": whole["stop_reason"], "stop_sequence": None}
        out.append(event({"type": "message_delta", "delta": final, "usage": {"output_tokens": usage["output_tokens"]}}))
        return [*out, event({"type": "message_stop"})]


def main(argv: list[str] | None = None) -> None:
    serve(AnthropicServer, "anthropic_server", "a scripted Anthropic Messages API server", 8766, argv)


if __name__ == "__main__":
    main()
