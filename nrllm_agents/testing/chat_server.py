"""A real HTTP server on loopback that speaks the OpenAI chat-completions wire format.

A test double shipped with the product: point ``OpenAIProvider`` (or any OpenAI client) at
``server.base_url`` and it plays a script over real sockets (standard library only). An entry is
``{"content": ...}``, ``{"tool_calls": [...]}``, ``{"status": 500, "error": ...}`` or
``{"raw": ...}``, with optional ``usage``, ``delay`` and ``chunk_delay``; ``by_turn=True`` picks the
entry by the request's assistant turns. Streamed answers are logged in ``streams`` (and whether
the client went away); a transcript OpenAI would refuse gets HTTP 400. An answer's reported
``completion_tokens`` are held to the request's bound (``max_completion_tokens`` or ``max_tokens``),
as a real server stops there (finish reason ``length``); ``honours_max_tokens=False`` makes a server
that reports whatever its script says.

The script format in full: docs/internals.md ("The OpenAI-compatible server"). For manual demos:
``python -m nrllm_agents.testing.chat_server --port 8765 --script turns.json``.
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from collections.abc import Iterable
from http.server import ThreadingHTTPServer
from typing import Any

from .http_handler import ScriptedHandler, StreamLog

__all__ = [
    "COMPLETIONS_PATH",
    "ChatCompletionServer",
    "StreamLog",
    "main",
    "serve",
    "transcript_problem",
    "validate_entry",
]

COMPLETIONS_PATH = "/v1/chat/completions"
_ENTRY_KEYS = frozenset({"content", "tool_calls", "usage", "status", "error", "raw", "delay", "chunk_delay"})


def validate_entry(entry: Any) -> dict[str, Any]:
    """Return the entry, or raise ``ValueError`` saying what is wrong with it."""
    if not isinstance(entry, dict):
        raise ValueError("a script entry must be an object")
    unknown = set(entry) - _ENTRY_KEYS
    if unknown:
        raise ValueError(f"script entry has unknown keys: {', '.join(sorted(unknown))}")
    kinds = [k for k in ("raw", "error") if k in entry]
    if "content" in entry or "tool_calls" in entry:
        kinds.append("answer")
    if len(kinds) != 1:
        raise ValueError("a script entry needs exactly one of content/tool_calls, error or raw")
    if "error" in entry and not (isinstance(entry.get("status"), int) and 400 <= entry["status"] <= 599):
        raise ValueError("an error entry needs an HTTP 'status' in [400, 599]")
    for call in entry.get("tool_calls") or []:
        if not isinstance(call, dict) or not isinstance(call.get("name"), str):
            raise ValueError("each tool call needs a string 'name'")
    usage = entry.get("usage", {})
    if not isinstance(usage, dict) or not all(isinstance(v, int) for v in usage.values()):
        raise ValueError("usage takes integer prompt_tokens/completion_tokens")
    for key in ("delay", "chunk_delay"):
        delay = entry.get(key, 0)
        if isinstance(delay, bool) or not isinstance(delay, (int, float)) or delay < 0:
            raise ValueError(f"{key} must be a non-negative number of seconds")
    return entry


def transcript_problem(messages: Any) -> str | None:
    """Why a chat-completions server refuses ``messages``, or ``None`` when it accepts them.

    Every ``tool_call_id`` of an assistant turn must be answered by a ``tool`` message
    before the next non-tool message, and a ``tool`` message must answer a call of the
    assistant turn right before it.
    """
    if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
        return "'messages' must be a list of message objects"
    pending: list[str] = []
    known: set[str] = set()
    for i, message in enumerate(messages):
        if message.get("role") == "tool":
            call_id = message.get("tool_call_id")
            if call_id not in known:
                return (
                    f"Invalid parameter: messages[{i}]: messages with role 'tool' must be a response to a "
                    f"preceding message with 'tool_calls' (unknown tool_call_id {call_id!r})."
                )
            pending = [p for p in pending if p != call_id]
            continue
        if pending:
            break
        calls = (message.get("tool_calls") or []) if message.get("role") == "assistant" else []
        pending = [str(c.get("id")) for c in calls if isinstance(c, dict)]
        known = set(pending)
    if pending:
        return (
            "An assistant message with 'tool_calls' must be followed by tool messages responding to each "
            f"'tool_call_id'. The following tool_call_ids did not have response messages: {', '.join(pending)}"
        )
    return None


def _text(host: str | bytes | bytearray) -> str:
    """A bound address's host as text (the socket API may give it as bytes)."""
    return host if isinstance(host, str) else bytes(host).decode()


def _error_body(message: str, status: int) -> dict[str, Any]:
    kind = {401: "invalid_request_error", 404: "invalid_request_error", 429: "rate_limit_error"}.get(
        status, "server_error" if status >= 500 else "invalid_request_error"
    )
    code = {401: "invalid_api_key", 429: "rate_limit_exceeded"}.get(status)
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


class ChatCompletionServer:
    """Serves scripted chat completions on ``127.0.0.1`` at an ephemeral port.

    ``requests`` holds the JSON body of every ``POST /v1/chat/completions`` received
    (``None`` when undecodable), including ones rejected for a bad key; ``request_headers``
    holds their headers, same order, names lower-cased. With ``api_key`` set, a request
    without ``Authorization: Bearer <api_key>`` is answered 401 and consumes no entry.
    ``honours_max_tokens``: the usage reported stops at the request's bound (``bound``).
    """

    def __init__(
        self,
        script: Iterable[dict[str, Any]] | None = None,
        *,
        api_key: str | None = None,
        by_turn: bool = False,
        host: str = "127.0.0.1",
        port: int = 0,
        verbose: bool = False,
        honours_max_tokens: bool = True,
    ) -> None:
        self.api_key = api_key
        self.honours_max_tokens = honours_max_tokens
        self.by_turn = by_turn
        self.verbose = verbose
        self.requests: list[Any] = []
        self.request_headers: list[dict[str, str]] = []
        self.streams: list[StreamLog] = []
        self.disconnected = threading.Event()
        self._script: list[dict[str, Any]] = []
        self._played = 0
        self._ids = 0
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._address = (host, port)
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.queue(*(script or ()))

    @property
    def base_url(self) -> str:
        """The API root to hand a client, e.g. ``http://127.0.0.1:54321/v1``."""
        if self._httpd is None:
            raise RuntimeError("the server is not started")
        host, port = self._httpd.server_address[:2]
        return f"http://{_text(host)}:{port}/v1"

    def queue(self, *entries: dict[str, Any]) -> None:
        """Append entries to the script; raises ``ValueError`` for a malformed one."""
        checked = [validate_entry(e) for e in entries]
        with self._lock:
            self._script.extend(checked)

    def start(self) -> ChatCompletionServer:
        """Bind and serve in a daemon thread; returns self."""
        if self._httpd is not None:
            return self
        self._stopping.clear()
        handler = type("_BoundHandler", (ScriptedHandler,), {"owner": self})  # the wire format: this class's hooks
        self._httpd = ThreadingHTTPServer(self._address, handler)
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, name="chat-completion-server", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and release the port; delayed answers still pending are cut short."""
        if self._httpd is None:
            return
        self._stopping.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._httpd = self._thread = None

    def __enter__(self) -> ChatCompletionServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # Called from handler threads.

    def _record(self, body: Any, headers: dict[str, str]) -> None:
        with self._lock:
            self.requests.append(body)
            self.request_headers.append(headers)

    def _next_entry(self, body: Any) -> dict[str, Any] | None:
        with self._lock:
            if self.by_turn:
                index = self.turn_index(body)
            else:
                index = self._played
            if index >= len(self._script):
                return None
            self._played += 1
            return self._script[index]

    def _next_id(self) -> int:
        with self._lock:
            self._ids += 1
            return self._ids

    # The wire format: a server for another API overrides these (see anthropic_server.py).

    def route(self, path: str, body: Any) -> bool | None:
        """For ``POST path``: ``None`` when no such route, else whether to stream the answer."""
        if path.split("?", 1)[0].rstrip("/") != COMPLETIONS_PATH:
            return None
        return isinstance(body, dict) and bool(body.get("stream"))

    def authorized(self, headers: Any) -> bool:
        """Whether the request carries the key (always, when the server has none)."""
        return self.api_key is None or headers.get("Authorization") == f"Bearer {self.api_key}"

    def error_body(self, message: str, status: int) -> dict[str, Any]:
        return _error_body(message, status)

    def problem(self, body: dict[str, Any]) -> str | None:
        """Why the API refuses this request (HTTP 400), or ``None``."""
        return transcript_problem(body.get("messages"))

    def turn_index(self, body: Any) -> int:
        """How many model turns the request's transcript holds (``by_turn`` plays that entry)."""
        messages = body.get("messages") if isinstance(body, dict) else None
        return sum(1 for m in messages or () if isinstance(m, dict) and m.get("role") == "assistant")

    def bound(self, body: dict[str, Any]) -> Any:
        """The most answer tokens the request allows (``None``: no bound)."""
        return body.get("max_completion_tokens", body.get("max_tokens"))

    def usage(self, entry: dict[str, Any], body: dict[str, Any]) -> tuple[int, int, bool]:
        """``(prompt, completion, cut)``: the entry's usage, its completion held to the request's
        bound when the server honours it (``cut``: the answer stopped there)."""
        usage = entry.get("usage") or {}
        prompt, completion = int(usage.get("prompt_tokens", 0)), int(usage.get("completion_tokens", 0))
        bound = self.bound(body)
        if self.honours_max_tokens and isinstance(bound, int) and not isinstance(bound, bool) and completion > bound:
            return prompt, max(bound, 0), True
        return prompt, completion, False

    def answer(self, entry: dict[str, Any], body: dict[str, Any]) -> dict[str, Any]:
        """The whole (non-streamed) answer body."""
        return self._completion(entry, body)

    def frames(self, entry: dict[str, Any], body: dict[str, Any]) -> list[tuple[bytes, str]]:
        """A streamed answer: each frame's bytes and the text it carries, the end marker last."""
        frames = []
        for chunk in self._chunks(entry, body):
            delta = (chunk.get("choices") or [{}])[0].get("delta") or {}
            frames.append((f"data: {json.dumps(chunk)}\n\n".encode(), delta.get("content") or ""))
        return [*frames, (b"data: [DONE]\n\n", "")]

    def _completion(self, entry: dict[str, Any], body: dict[str, Any]) -> dict[str, Any]:
        n = self._next_id()
        message: dict[str, Any] = {"role": "assistant", "content": entry.get("content")}
        finish_reason = "stop"
        if entry.get("tool_calls"):
            message["tool_calls"] = [
                {
                    "id": str(call.get("id") or f"call_{n}_{i + 1}"),
                    "type": "function",
                    "function": {
                        "name": call["name"],
                        "arguments": call["arguments"]
                        if isinstance(call.get("arguments"), str)
                        else json.dumps(call.get("arguments") or {}),
                    },
                }
                for i, call in enumerate(entry["tool_calls"])
            ]
            finish_reason = "tool_calls"
        completion: dict[str, Any] = {
            "id": f"chatcmpl-{n}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": str(body.get("model") or "scripted"),
            "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
        }
        if "usage" in entry:
            prompt, completion_tokens, cut = self.usage(entry, body)
            if cut and not entry.get("tool_calls"):
                completion["choices"][0]["finish_reason"] = "length"
            completion["usage"] = {
                "prompt_tokens": prompt,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt + completion_tokens,
            }
        return completion

    def _chunks(self, entry: dict[str, Any], body: dict[str, Any]) -> list[dict[str, Any]]:
        """The ``chat.completion.chunk`` events of a streamed answer, in order."""
        whole = self._completion(entry, body)
        base = {
            "id": whole["id"],
            "object": "chat.completion.chunk",
            "created": whole["created"],
            "model": whole["model"],
        }
        message, finish = whole["choices"][0]["message"], whole["choices"][0]["finish_reason"]

        def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
            return {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}]}

        out = [chunk({"role": "assistant", "content": ""})]
        words = (message.get("content") or "").split(" ")
        out += [chunk({"content": w + (" " if i < len(words) - 1 else "")}) for i, w in enumerate(words) if w]
        for i, call in enumerate(message.get("tool_calls") or []):
            function = call["function"]
            out.append(
                chunk(
                    {
                        "tool_calls": [
                            {
                                "index": i,
                                "id": call["id"],
                                "type": "function",
                                "function": {"name": function["name"], "arguments": ""},
                            }
                        ]
                    }
                )
            )
            out.append(chunk({"tool_calls": [{"index": i, "function": {"arguments": function["arguments"]}}]}))
        out.append(chunk({}, finish))
        if "usage" in whole and (body.get("stream_options") or {}).get("include_usage"):
            out.append({**base, "choices": [], "usage": whole["usage"]})
        return out


def serve(
    server_class: type[ChatCompletionServer], module: str, description: str, port: int, argv: list[str] | None
) -> None:
    """Serve a script until interrupted: the command line of each shipped server."""
    parser = argparse.ArgumentParser(prog=f"python -m nrllm_agents.testing.{module}", description=description)
    parser.add_argument("--host", default="127.0.0.1", help="interface to bind (default: loopback)")
    parser.add_argument("--port", type=int, default=port, help="port to listen on (0: any free port)")
    parser.add_argument(
        "--script", help="JSON file holding a list of script entries (default: the scripted provider's demo turns)"
    )
    parser.add_argument("--api-key", help="require this key")
    parser.add_argument(
        "--queue", action="store_true", help="consume entries in order across requests instead of by assistant turn"
    )
    args = parser.parse_args(argv)
    if args.script:
        with open(args.script, encoding="utf-8") as fh:
            script = json.load(fh)
    else:
        from nrllm_agents.domain.providers.scripted import DEMO_SCRIPT

        script = DEMO_SCRIPT
    if not isinstance(script, list):
        parser.error("the script file must hold a JSON list")
    try:
        server = server_class(
            script, api_key=args.api_key, by_turn=not args.queue, host=args.host, port=args.port, verbose=True
        )
    except ValueError as exc:
        parser.error(str(exc))
    with server:
        print(f"serving {len(script)} entries at {server.base_url} (Ctrl-C to stop)", flush=True)
        try:
            threading.Event().wait()
        except KeyboardInterrupt:
            pass


def main(argv: list[str] | None = None) -> None:
    serve(ChatCompletionServer, "chat_server", "A scripted OpenAI-compatible chat-completions server.", 8765, argv)


if __name__ == "__main__":
    main()
