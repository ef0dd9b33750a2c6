"""The HTTP side of the scripted model servers: one request read, routed, answered or streamed.

``ChatCompletionServer`` (and the Anthropic and Gemini servers built on it) decide the wire
format through their hooks (``route``, ``authorized``, ``problem``, ``answer``, ``frames``);
this handler does what every one of them does the same way: record the request, refuse it
(404, 401, 400, 500 for an exhausted script), wait an entry's ``delay``, send a body or the
frames of a stream ``chunk_delay`` apart, and log in a ``StreamLog`` when the client went away.
"""

from __future__ import annotations

import json
import select
import socket
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any, Protocol


@dataclass
class StreamLog:
    """One streamed answer: each piece sent ``(time.time(), text)``, and how it ended."""

    sent: list[tuple[float, str]] = field(default_factory=list)
    disconnected_at: float | None = None  # the client went away before the end
    finished: bool = False  # ``[DONE]`` was sent


class ScriptedServer(Protocol):
    """What the handler asks of its server (``ChatCompletionServer`` and its subclasses)."""

    verbose: bool
    streams: list[StreamLog]
    disconnected: threading.Event
    _lock: threading.Lock
    _stopping: threading.Event

    def route(self, path: str, body: Any) -> bool | None: ...

    def authorized(self, headers: Any) -> bool: ...

    def error_body(self, message: str, status: int) -> dict[str, Any]: ...

    def problem(self, body: dict[str, Any]) -> str | None: ...

    def answer(self, entry: dict[str, Any], body: dict[str, Any]) -> dict[str, Any]: ...

    def frames(self, entry: dict[str, Any], body: dict[str, Any]) -> list[tuple[bytes, str]]: ...

    def _record(self, body: Any, headers: dict[str, str]) -> None: ...

    def _next_entry(self, body: Any) -> dict[str, Any] | None: ...


class ScriptedHandler(BaseHTTPRequestHandler):
    """Serves one request for ``owner`` (bound per server, see ``ChatCompletionServer.start``)."""

    owner: ScriptedServer
    server_version = "nrllm-chat-server/1"

    def do_POST(self) -> None:
        owner = self.owner
        raw = self._read_body()
        try:
            body: Any = json.loads(raw)
        except ValueError:
            body = None
        stream = owner.route(self.path, body)
        if stream is None:
            self._send_json(404, owner.error_body(f"no route for POST {self.path}", 404))
            return
        owner._record(body, {k.lower(): v for k, v in self.headers.items()})
        if not owner.authorized(self.headers):
            self._send_json(401, owner.error_body("Incorrect API key provided.", 401))
            return
        if not isinstance(body, dict):
            self._send_json(400, owner.error_body("the request body is not a JSON object", 400))
            return
        problem = owner.problem(body)
        if problem is not None:
            self._send_json(400, owner.error_body(problem, 400))
            return
        entry = owner._next_entry(body)
        if entry is None:
            self._send_json(500, owner.error_body("script exhausted", 500))
            return
        if entry.get("delay") and owner._stopping.wait(float(entry["delay"])):
            return  # stopping: drop the connection unanswered
        if "raw" in entry:  # verbatim, as an event stream when one was asked for
            kind = "text/event-stream" if stream else "application/json"
            self._send(int(entry.get("status", 200)), str(entry["raw"]).encode(), kind)
        elif "error" in entry:
            self._send_json(int(entry["status"]), owner.error_body(str(entry["error"]), int(entry["status"])))
        elif stream:
            self._stream(owner.frames(entry, body), float(entry.get("chunk_delay") or 0))
        else:
            self._send_json(200, owner.answer(entry, body))

    def _stream(self, frames: list[tuple[bytes, str]], pause: float) -> None:
        """Send the frames ``pause`` apart; the last one (the end marker) marks it finished."""
        log = StreamLog()
        with self.owner._lock:
            self.owner.streams.append(log)
        try:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.end_headers()
            self.wfile.flush()
            for i, (data, text) in enumerate(frames):
                if i and pause and i < len(frames) - 1 and self._client_left(pause):
                    raise ConnectionResetError
                self.wfile.write(data)
                self.wfile.flush()
                if i < len(frames) - 1:
                    log.sent.append((time.time(), text))
            log.finished = True
        except (BrokenPipeError, ConnectionResetError, OSError):
            log.disconnected_at = time.time()
            self.owner.disconnected.set()
            self.close_connection = True

    def _client_left(self, seconds: float) -> bool:
        """Wait ``seconds`` unless the client closes its end first (then ``True``, at once)."""
        if self.owner._stopping.is_set():
            return True
        readable, _, _ = select.select([self.connection], [], [], seconds)
        if not readable:
            return False
        try:
            return bool(self.connection.recv(1, socket.MSG_PEEK) == b"")
        except OSError:
            return True

    def do_GET(self) -> None:
        self._send_json(404, self.owner.error_body(f"no route for GET {self.path}", 404))

    def _read_body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length > 0 else b""

    def _send_json(self, status: int, payload: dict[str, Any]) -> None:
        self._send(status, json.dumps(payload).encode())

    def _send(self, status: int, data: bytes, content_type: str = "application/json") -> None:
        try:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):  # the client gave up (e.g. its timeout)
            pass

    def log_message(self, format: str, *args: Any) -> None:
        if self.owner.verbose:
            super().log_message(format, *args)
