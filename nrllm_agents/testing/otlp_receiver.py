"""A real OTLP/HTTP trace receiver on loopback, for tests and benchmarks: what an exporter sent.

Point ``OTEL_EXPORTER_OTLP_ENDPOINT`` at ``receiver.endpoint`` and every span the process
exports arrives here as a ``POST /v1/traces`` of an ``ExportTraceServiceRequest`` (protobuf,
gzip or not), decoded with ``opentelemetry-proto``. ``spans`` holds them as plain dicts
(``trace_id``, ``span_id``, ``parent_span_id`` in hex, ``name``, ``kind``, ``attributes``,
``events``, ``links``, ``status``, ``service``, ``start``/``end`` in Unix nanoseconds);
``wait_for`` blocks until a condition on them holds (woken by each export, no polling).
Standard library and ``opentelemetry-proto`` only.
"""

from __future__ import annotations

import gzip
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

TRACES_PATH = "/v1/traces"
SPAN_KINDS = {0: "unspecified", 1: "internal", 2: "server", 3: "client", 4: "producer", 5: "consumer"}
STATUS_CODES = {0: "unset", 1: "ok", 2: "error"}


def _value(any_value: Any) -> Any:
    """A decoded ``AnyValue``: str, bool, int, float, bytes, list or dict."""
    kind = any_value.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return [_value(v) for v in any_value.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: _value(kv.value) for kv in any_value.kvlist_value.values}
    return getattr(any_value, kind)


def _attributes(pairs: Any) -> dict[str, Any]:
    return {kv.key: _value(kv.value) for kv in pairs}


def decode(body: bytes) -> list[dict[str, Any]]:
    """The spans of one ``ExportTraceServiceRequest``; raises ``DecodeError`` for a bad body."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    request = ExportTraceServiceRequest()
    request.ParseFromString(body)
    found = []
    for resource_spans in request.resource_spans:
        resource = _attributes(resource_spans.resource.attributes)
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                found.append(
                    {
                        "trace_id": span.trace_id.hex(),
                        "span_id": span.span_id.hex(),
                        "parent_span_id": span.parent_span_id.hex() or None,
                        "name": span.name,
                        "kind": SPAN_KINDS.get(span.kind, str(span.kind)),
                        "start": span.start_time_unix_nano,
                        "end": span.end_time_unix_nano,
                        "attributes": _attributes(span.attributes),
                        "events": [
                            {"name": e.name, "time": e.time_unix_nano, "attributes": _attributes(e.attributes)}
                            for e in span.events
                        ],
                        "links": [
                            {"trace_id": link.trace_id.hex(), "span_id": link.span_id.hex()} for link in span.links
                        ],
                        "status": {"code": STATUS_CODES.get(span.status.code, "?"), "message": span.status.message},
                        "scope": scope_spans.scope.name,
                        "service": resource.get("service.name"),
                        "resource": resource,
                    }
                )
    return found


class OtlpReceiver:
    """Receives OTLP/HTTP trace exports on ``127.0.0.1`` at an ephemeral port; a context manager."""

    def __init__(self) -> None:
        self.spans: list[dict[str, Any]] = []
        self.requests = 0
        self.refused: list[str] = []  # bodies that were no ExportTraceServiceRequest
        self._changed = threading.Condition()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def endpoint(self) -> str:
        """The value for ``OTEL_EXPORTER_OTLP_ENDPOINT`` (the exporter appends ``/v1/traces``)."""
        if self._httpd is None:
            raise RuntimeError("the receiver is not started")
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def start(self) -> OtlpReceiver:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                if self.path != TRACES_PATH:
                    self.send_response(404)
                    self.end_headers()
                    return
                try:
                    received = decode(body)
                except Exception as exc:  # a body that is not OTLP: the test sees it in ``refused``
                    owner._add([], refused=f"{type(exc).__name__}: {exc}")
                    self.send_response(400)
                    self.end_headers()
                    return
                owner._add(received)
                self._answer()

            def _answer(self) -> None:
                from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

                data = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, name="otlp-receiver", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None

    def __enter__(self) -> OtlpReceiver:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _add(self, spans: list[dict[str, Any]], refused: str | None = None) -> None:
        with self._changed:
            self.requests += 1
            self.spans.extend(spans)
            if refused is not None:
                self.refused.append(refused)
            self._changed.notify_all()

    def wait_for(self, predicate: Callable[[list[dict[str, Any]]], Any], timeout: float = 30.0) -> Any:
        """Block until ``predicate(spans)`` is truthy (checked at each export); returns its value.
        Raises ``TimeoutError`` naming what arrived when ``timeout`` passes first."""
        with self._changed:
            value = self._changed.wait_for(lambda: predicate(list(self.spans)), timeout)
            if not value:
                names = sorted(f"{s['service']}:{s['name']}" for s in self.spans)
                raise TimeoutError(f"the spans awaited did not arrive within {timeout:g} s; got {names}")
            return value

    def trace(self, trace_id: str) -> list[dict[str, Any]]:
        """The spans of one trace received so far, in start order."""
        with self._changed:
            return sorted((s for s in self.spans if s["trace_id"] == trace_id), key=lambda s: s["start"])
