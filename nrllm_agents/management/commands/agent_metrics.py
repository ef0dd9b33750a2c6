"""``manage.py agent_metrics``: serve this host's worker metrics on a port of their own."""

from __future__ import annotations

import threading
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from nrllm_agents.management import console


class Command(BaseCommand):
    help = (
        "Serve the metrics that this host's processes (rqworker work horses, agent_reap, ...) wrote to "
        "PROMETHEUS_MULTIPROC_DIR, in the Prometheus text format, for a host without a web server. It adds "
        "no database gauges (the web server's /metrics has them, once for the whole deployment). Bind it to "
        "a private address: it has no authentication."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--port", type=int, default=9108, help="TCP port (default 9108).")
        parser.add_argument("--addr", default="127.0.0.1", help="Address to bind (default 127.0.0.1).")

    def handle(self, *args: Any, port: int, addr: str, **options: Any) -> None:
        from prometheus_client import CollectorRegistry, start_http_server
        from prometheus_client.multiprocess import MultiProcessCollector

        from nrllm_agents.observability import metrics

        console.in_range("--port", port, 1, 65535)
        if not metrics.MULTIPROC_DIR:
            raise CommandError(
                "PROMETHEUS_MULTIPROC_DIR is not set: give this command and the workers the same directory",
                returncode=2,
            )
        if not 0 < port < 65536:
            raise CommandError("--port must be between 1 and 65535", returncode=2)
        registry = CollectorRegistry()
        # (prometheus_client's multiprocess module is not annotated)
        MultiProcessCollector(registry, path=metrics.MULTIPROC_DIR)  # type: ignore[no-untyped-call]
        try:
            server, _ = start_http_server(port, addr=addr, registry=registry)
        except OSError as exc:
            raise CommandError(f"cannot listen on {addr}:{port}: {exc.strerror or exc}", returncode=1) from None
        self.stdout.write(self.style.SUCCESS(f"serving {metrics.MULTIPROC_DIR} on http://{addr}:{port}/metrics"))
        self.stdout.flush()
        try:
            threading.Event().wait()
        except KeyboardInterrupt:
            server.shutdown()
