"""Bulk cancel (``AgentRuntime.cancel_many``) beside a per-row loop of ``AgentRuntime.cancel``.

Works on the database server that ``DATABASE_URL`` names (PostgreSQL is the point; SQLite
works too) but never on that database: it creates a throwaway one beside it, fills it with
``--runs`` queued runs, times one set-based cancel of them all, refills it, times a loop of
single cancels over the same number of runs, prints both with the ratio, and drops it.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/nrllm_agents .venv/bin/python bench/bulk_cancel.py
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

import django  # noqa: E402

django.setup()

from django.conf import settings  # noqa: E402
from django.db import connection  # noqa: E402
from django.test.utils import CaptureQueriesContext  # noqa: E402

from nrllm_agents.models import AgentRun, AgentRunEvent, RunStatus  # noqa: E402
from nrllm_agents.runtime.agent_runtime import AgentRuntime  # noqa: E402


def fill(n: int) -> list:
    """Start from an empty table and insert ``n`` queued runs in batches (setup, not measured)."""
    AgentRunEvent.objects.all().delete()
    AgentRun.objects.all().delete()
    AgentRun.objects.bulk_create(
        [
            AgentRun(
                status=RunStatus.QUEUED,
                prompt=f"task {i}",
                provider="scripted",
                request_payload={"prompt": f"task {i}"},
            )
            for i in range(n)
        ],
        batch_size=2000,
    )
    return list(AgentRun.objects.values_list("pk", flat=True))


def check(n: int) -> None:
    cancelled = AgentRun.objects.filter(status=RunStatus.CANCELLED, stopped_at__isnull=False).count()
    steps = AgentRunEvent.objects.filter(kind="cancelled").count()
    if (cancelled, steps) != (n, n):
        raise SystemExit(f"expected {n} cancelled runs with one cancelled step each, got {cancelled} / {steps}")


def bench(n: int) -> None:
    runtime = AgentRuntime()

    fill(n)
    with CaptureQueriesContext(connection) as queries:
        started = time.perf_counter()
        result = runtime.cancel_many(AgentRun.objects.filter(status=RunStatus.QUEUED), source="system", reason="bench")
        bulk = time.perf_counter() - started
    statements = len(queries)
    check(n)
    assert result.cancelled_total == n, result

    pks = fill(n)
    started = time.perf_counter()
    for pk in pks:
        runtime.cancel(pk, source="system", reason="bench")
    loop = time.perf_counter() - started
    check(n)

    print(f"cancel {n} queued runs on {connection.vendor}")
    print(f"  cancel_many (set-based) : {bulk:8.3f} s  ({statements} statements)")
    print(f"  loop of cancel (per row): {loop:8.3f} s  ({loop / n * 1000:.2f} ms per run)")
    print(f"  ratio loop / bulk       : {loop / bulk:8.1f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10_000, help="queued runs to cancel each way (default 10000)")
    args = parser.parse_args()
    settings.DEBUG = False  # no query log growing through the loop; the bulk count is captured explicitly

    # A throwaway database of our own, named so it never collides with the configured one.
    test = connection.settings_dict.setdefault("TEST", {})
    if connection.vendor == "sqlite":
        test["NAME"] = str(Path(tempfile.gettempdir()) / f"nrllm_bench_bulk_cancel_{os.getpid()}.sqlite3")
    else:
        test["NAME"] = f"nrllm_bench_bulk_cancel_{os.getpid()}"
    configured = connection.settings_dict["NAME"]
    connection.creation.create_test_db(verbosity=0, autoclobber=True, serialize=False)
    try:
        bench(args.runs)
    finally:
        connection.creation.destroy_test_db(configured, verbosity=0)


if __name__ == "__main__":
    main()
