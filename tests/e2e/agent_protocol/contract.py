"""Every request the SDKs make, and every answer, checked against ``/lg/openapi.json``.

The Python SDK's own ``httpx`` client gets a response hook that records each exchange; the
Node SDK, another process, talks to the server through a ``RecordingProxy`` that records the
same way. At the end of the test each exchange must be an operation of the document, its JSON
body valid against the operation's request schema, its status documented, and its JSON answer
valid against the schema of that status (JSON Schema 2020-12, with the document's components
for ``$ref``).
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
from jsonschema import Draft202012Validator


@dataclass
class Exchange:
    method: str
    path: str
    body: Any
    status: int
    answer: Any


@dataclass
class Recorder:
    prefix: str
    seen: list[Exchange] = field(default_factory=list)

    def hook(self, response: httpx.Response) -> None:
        request = response.request
        raw = request.content
        answer = None
        if response.headers.get("content-type", "").startswith("application/json"):
            response.read()
            answer = json.loads(response.content) if response.content else None
        path = request.url.path.removeprefix(self.prefix)
        self.seen.append(Exchange(request.method, path, json.loads(raw) if raw else None, response.status_code, answer))

    async def ahook(self, response: httpx.Response) -> None:
        request = response.request
        answer = None
        if response.headers.get("content-type", "").startswith("application/json"):
            await response.aread()
            answer = json.loads(response.content) if response.content else None
        raw = request.content
        path = request.url.path.removeprefix(self.prefix)
        self.seen.append(Exchange(request.method, path, json.loads(raw) if raw else None, response.status_code, answer))


# Headers of one hop, which the proxy does not pass on; it frames each answer itself.
_HOP = {"host", "connection", "keep-alive", "content-length", "transfer-encoding", "content-encoding"}
_HOP |= {"accept-encoding"}  # the server answers uncompressed, so the recorder reads its JSON as is


class RecordingProxy:
    """An HTTP proxy in front of ``upstream`` that records each exchange with ``hook`` (a
    ``Recorder``'s). Answers are passed on chunk by chunk as they come, so a stream's pieces
    reach the client as the server writes them and a client's disconnect reaches the server."""

    def __init__(self, upstream: str, hook: Any) -> None:
        client = httpx.Client(base_url=upstream, timeout=None, event_hooks={"response": [hook]})

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, and chunked answers

            def forward(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP}
                request = client.build_request(self.command, self.path, headers=headers, content=body or None)
                response = client.send(request, stream=True)
                try:
                    self.relay(response)
                finally:
                    response.close()

            def relay(self, response: httpx.Response) -> None:
                self.send_response(response.status_code)
                for name, value in response.headers.multi_items():
                    if name.lower() not in _HOP:
                        self.send_header(name, value)
                if response.status_code in (204, 304):
                    self.end_headers()
                    return
                self.send_header("transfer-encoding", "chunked")
                self.end_headers()
                try:
                    for chunk in filter(None, response.iter_bytes()):  # an empty chunk would end the answer
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                        self.wfile.flush()
                    self.wfile.write(b"0\r\n\r\n")
                except (BrokenPipeError, ConnectionResetError):
                    self.close_connection = True  # the client left; closing ours tells the server

            do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = forward

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._client = client
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> RecordingProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._client.close()


def _template(path: str) -> re.Pattern[str]:
    return re.compile("^" + re.sub(r"\{[^}]+\}", "[^/]+", path) + "$")


def _valid(document: dict[str, Any], schema: dict[str, Any], value: Any) -> list[str]:
    validator = Draft202012Validator({**schema, "components": document["components"]})
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(value)]


def problems(document: dict[str, Any], seen: list[Exchange]) -> list[str]:
    """What in ``seen`` the document does not describe."""
    found: list[str] = []
    templates = [(_template(p), p) for p in document["paths"]]
    for ex in seen:
        where = f"{ex.method} {ex.path} -> {ex.status}"
        match = next((p for pattern, p in templates if pattern.match(ex.path)), None)
        operation = document["paths"].get(match, {}).get(ex.method.lower()) if match else None
        if operation is None:
            found.append(f"{where}: no such operation")
            continue
        if ex.body is not None:
            body_schema = operation.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema")
            if body_schema is None:
                found.append(f"{where}: a body the operation does not take")
            else:
                found += [f"{where}: request {e}" for e in _valid(document, body_schema, ex.body)]
        answer = operation["responses"].get(str(ex.status))
        if answer is None:
            found.append(f"{where}: undocumented status")
            continue
        schema = answer.get("content", {}).get("application/json", {}).get("schema")
        if schema is not None and ex.answer is not None:
            found += [f"{where}: answer {e}" for e in _valid(document, schema, ex.answer)]
    return found
