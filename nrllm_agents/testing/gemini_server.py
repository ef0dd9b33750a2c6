"""A real HTTP server on loopback that speaks the Gemini API's ``generateContent``.

A test double shipped with the product, scripted like ``chat_server`` (``by_turn`` counts the
``model`` turns). Point ``GeminiProvider`` (or the ``google-genai`` SDK) at ``server.base_url``. It
answers ``:generateContent`` and ``:streamGenerateContent?alt=sse`` (a turn's first
``functionCall`` carries a ``thoughtSignature``, as Gemini 3 sends), refuses with HTTP 400 what the
real API refuses (unanswered ``functionCall`` parts), with 401 a request without the
``x-goog-api-key`` when ``api_key`` is set, and answers errors in Google's shape.

The wire details: docs/internals.md ("The Gemini server"). For manual demos:
``python -m nrllm_agents.testing.gemini_server --port 8767``.
"""

from __future__ import annotations

import base64
import json
import re
from typing import Any
from urllib.parse import urlsplit

from .chat_server import ChatCompletionServer, serve

_ROUTE = re.compile(r"^/(v1beta|v1|v1alpha)/models/([^/:]+):(generateContent|streamGenerateContent)$")
_STATUS = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    408: "DEADLINE_EXCEEDED",
    409: "ABORTED",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}


def _parts(content: Any, key: str) -> list[dict[str, Any]]:
    return [p[key] for p in content.get("parts") or [] if isinstance(p, dict) and isinstance(p.get(key), dict)]


def transcript_problem(contents: Any) -> str | None:
    """Why ``generateContent`` refuses ``contents``, or ``None`` when it accepts them."""
    if not isinstance(contents, list) or not contents or not all(isinstance(c, dict) for c in contents):
        return "* GenerateContentRequest.contents: contents is not specified"
    calls: list[str] = []
    for i, content in enumerate(contents):
        if content.get("role") not in ("user", "model", None):
            return f"* GenerateContentRequest.contents[{i}].role: must be 'user' or 'model'"
        if not content.get("parts"):
            return f"* GenerateContentRequest.contents[{i}].parts: contents.parts must not be empty."
        answers = [str(r.get("name")) for r in _parts(content, "functionResponse")]
        if (calls or answers) and sorted(answers) != sorted(calls):
            return (
                "Please ensure that the number of function response parts is equal to the number of function "
                f"call parts of the function call turn (contents[{i}]: {len(answers)} for {len(calls)})."
            )
        calls = [str(c.get("name")) for c in _parts(content, "functionCall")] if content.get("role") == "model" else []
    return None


class GeminiServer(ChatCompletionServer):
    """Serves scripted ``generateContent`` answers on ``127.0.0.1`` at an ephemeral port."""

    @property
    def base_url(self) -> str:
        """The root to hand the SDK (it appends ``v1beta/models/...``), e.g. ``http://127.0.0.1:54321/``."""
        return super().base_url.removesuffix("v1")

    def route(self, path: str, body: Any) -> bool | None:
        match = _ROUTE.match(urlsplit(path).path)
        if match is None:
            return None
        return match.group(3) == "streamGenerateContent"

    def authorized(self, headers: Any) -> bool:
        return self.api_key is None or headers.get("x-goog-api-key") == self.api_key

    def error_body(self, message: str, status: int) -> dict[str, Any]:
        return {"error": {"code": status, "message": message, "status": _STATUS.get(status, "UNKNOWN")}}

    def problem(self, body: dict[str, Any]) -> str | None:
        return transcript_problem(body.get("contents"))

    def turn_index(self, body: Any) -> int:
        contents = body.get("contents") if isinstance(body, dict) else None
        return sum(1 for c in contents or () if isinstance(c, dict) and c.get("role") == "model")

    def _response(
        self, parts: list[dict[str, Any]], finish: str | None, usage: dict[str, int] | None
    ) -> dict[str, Any]:
        candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": 0}
        if finish:
            candidate["finishReason"] = finish
        response: dict[str, Any] = {"candidates": [candidate], "modelVersion": "scripted", "responseId": "r"}
        if usage is not None:
            response["usageMetadata"] = usage
        return response

    def bound(self, body: dict[str, Any]) -> Any:
        config = body.get("generationConfig")
        return config.get("maxOutputTokens") if isinstance(config, dict) else None

    def _pieces(self, entry: dict[str, Any], body: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, int], bool]:
        n = self._next_id()
        parts: list[dict[str, Any]] = []
        if entry.get("content"):
            parts.append({"text": entry["content"]})
        for i, call in enumerate(entry.get("tool_calls") or []):
            arguments = call.get("arguments") or {}
            if isinstance(arguments, str):
                arguments = json.loads(arguments)
            call_id = str(call.get("id") or f"fc_{n}_{i + 1}")
            part: dict[str, Any] = {"functionCall": {"id": call_id, "name": call["name"], "args": arguments}}
            if i == 0:  # Gemini 3 signs a turn's first call, and wants the signature back with it
                part["thoughtSignature"] = base64.b64encode(f"signed {call_id}".encode()).decode()
            parts.append(part)
        prompt, completion, cut = self.usage(entry, body)
        usage = {"promptTokenCount": prompt, "candidatesTokenCount": completion, "totalTokenCount": prompt + completion}
        return parts, usage, cut and not entry.get("tool_calls")  # cut: the finish reason says so

    def answer(self, entry: dict[str, Any], body: dict[str, Any]) -> dict[str, Any]:
        parts, usage, cut = self._pieces(entry, body)
        return self._response(parts, "MAX_TOKENS" if cut else "STOP", usage)

    def frames(self, entry: dict[str, Any], body: dict[str, Any]) -> list[tuple[bytes, str]]:
        parts, usage, cut = self._pieces(entry, body)

        def event(response: dict[str, Any], text: str = "") -> tuple[bytes, str]:
            return f"data: {json.dumps(response)}\r\n\r\n".encode(), text

        out = []
        for part in parts:
            if "text" in part:
                words = part["text"].split(" ")
                for i, word in enumerate(words):
                    piece = word + (" " if i < len(words) - 1 else "")
                    if piece:
                        out.append(event(self._response([{"text": piece}], None, None), piece))
            else:
                out.append(event(self._response([part], None, None)))
        # The last event: the finish reason and the usage (with an empty text part, as Gemini sends).
        return [*out, event(self._response([{"text": ""}], "MAX_TOKENS" if cut else "STOP", usage))]


def main(argv: list[str] | None = None) -> None:
    serve(GeminiServer, "gemini_server", "a scripted Gemini API (generateContent) server", 8767, argv)


if __name__ == "__main__":
    main()
