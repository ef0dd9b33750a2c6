"""A loopback HTTP API that honours ``Idempotency-Key``, as payment APIs do: the witness outside
the database of tests that repeat a tool call.

Every ``POST`` needs the header (a ``400`` without it). The first request with a key applies its
effect (one entry in ``effects``) and answers ``201`` with ``{"id", "key", "body"}``; a request
with a key already seen applies nothing and answers the same body again, ``200``. ``requests``
holds every request as it came, ``(key, path, body)``, repeats included. A path under
``/unkeyed/`` is an API that honours no key: every request applies its effect (``201``).
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class KeyedServer:
    """``with KeyedServer() as api:`` serves on ``api.url`` until the block ends."""

    def __init__(self) -> None:
        self.requests: list[tuple[str | None, str, Any]] = []
        self.effects: list[dict[str, Any]] = []
        self._answers: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self._server is not None, "not serving"
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def keys(self) -> list[str | None]:
        """The key of every request, in order."""
        with self._lock:
            return [key for key, _, _ in self.requests]

    def handle(self, key: str | None, path: str, body: Any) -> tuple[int, dict[str, Any]]:
        """The status and answer for one request (the effect applied once per key)."""
        with self._lock:
            self.requests.append((key, path, body))
            if path.startswith("/unkeyed/"):  # no key honoured: every request is an effect
                answer = {"id": f"ch_{len(self.effects) + 1}", "key": None, "body": body}
                self.effects.append(answer)
                return 201, answer
            if not key:
                return 400, {"error": "an Idempotency-Key header is required"}
            if key in self._answers:
                return 200, self._answers[key]
            answer = {"id": f"ch_{len(self.effects) + 1}", "key": key, "body": body}
            self.effects.append(answer)
            self._answers[key] = answer
            return 201, answer

    def __enter__(self) -> KeyedServer:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body = json.loads(raw) if raw else None
                except ValueError:
                    body = raw.decode("utf-8", "replace")
                status, answer = owner.handle(self.headers.get("Idempotency-Key"), self.path, body)
                data = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:  # quiet in test output
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, name="keyed-server", daemon=True).start()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
