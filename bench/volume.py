"""Every operator surface at 10,000 runs and at ``--runs`` runs: does it stay flat as history grows?

Creates a throwaway database on the server ``DATABASE_URL`` names (PostgreSQL), migrates it and
fills it with SQL (``INSERT ... SELECT`` over ``generate_series``, not the ORM): 10 users, 10,000
runs of ``--steps`` steps each (90 % completed, 10 % cancelled, one in twenty through a rarer
provider), ``VACUUM ANALYZE``, and times every surface; then adds the rest of ``--runs`` as older
history (the newest runs stay the same, so each page shows the same rows), ``VACUUM ANALYZE``, and
times them again. Prints each surface's median at both sizes and the ratio, the step table's
bytes per step, and the load average. Each surface is timed through the user's path: the
Django test client for the admin, the API, the playground, the Agent Protocol and
``/metrics`` (``agent_metrics`` serves the same collectors, forever); ``call_command`` for the
commands; the store and ``AgentRuntime`` for the step
boundary and the cancel.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres .venv/bin/python bench/volume.py --runs 1000000

``--only operations --only playground`` times just the surfaces so named (no hot path).

Each measurement is one function of ``SURFACES`` (or ``hot_path``), so a later one (a retention
pass, say) is one more entry. The fill is ``nrllm_agents.testing.volume``'s, which the test of
the admin at a million runs uses too.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from step_overhead import production_settings, throwaway_database  # noqa: E402  (bench/ is this script's directory)

SMALL = 10_000
USERS = 10


# --- the surfaces ------------------------------------------------------------------------------
class Bench:
    """The clients and rows every measurement uses."""

    def __init__(self, users: list[Any], staff: Any) -> None:
        from django.test import Client

        self.staff = Client()
        self.staff.force_login(staff)
        self.user = Client()
        self.user.force_login(users[0])  # a user with a tenth of the runs
        self.newest = None
        self.refused: set[str] = set()

    def get(self, client: Any, url: str, data: dict[str, Any] | None = None) -> Any:
        response = client.get(url, data or {})
        if response.status_code != 200 and url not in self.refused:
            self.refused.add(url)
            print(f"  (!) {url} {data or ''} answered {response.status_code}", flush=True)
        return response


ADMIN = "/admin/nrllm_agents/agentrun/"
WEEK_AGO = (datetime.now(UTC) - timedelta(days=7)).isoformat()


def admin_list(b: Bench) -> None:
    b.get(b.staff, ADMIN)


def admin_filter(params: dict[str, str]) -> Callable[[Bench], None]:
    def measure(b: Bench) -> None:
        b.get(b.staff, ADMIN, params)

    return measure


def admin_run_page(b: Bench) -> None:
    b.get(b.staff, f"{ADMIN}{b.newest}/change/")


def admin_operations(b: Bench) -> None:
    b.get(b.staff, f"{ADMIN}operations/")


def api(path: str, who: str = "staff", params: dict[str, str] | None = None) -> Callable[[Bench], None]:
    def measure(b: Bench) -> None:
        b.get(getattr(b, who), path.format(run=b.newest), params)

    return measure


def api_third_page(b: Bench) -> None:
    """Following ``next`` twice: the keyset pages."""
    body = b.get(b.staff, "/api/runs/").json()
    for _ in range(2):
        body = b.get(b.staff, body["next"]).json()


def lg_thread_search(b: Bench) -> None:
    response = b.user.post("/lg/threads/search", {"limit": 10}, content_type="application/json")
    assert response.status_code == 200, response.status_code


def command(*args: str) -> Callable[[Bench], None]:
    def measure(b: Bench) -> None:
        from django.core.management import call_command

        call_command(*args, stdout=io.StringIO(), stderr=io.StringIO())

    return measure


SURFACES: list[tuple[str, Callable[[Bench], None]]] = [
    ("admin list", admin_list),
    ("admin list ?status=running", admin_filter({"status__exact": "running"})),
    ("admin list ?status=cancelled", admin_filter({"status__exact": "cancelled"})),
    ("admin list ?provider=anthropic", admin_filter({"provider": "anthropic"})),
    ("admin list ?termination_reason=cancelled", admin_filter({"termination_reason__exact": "cancelled"})),
    ("admin list ?cancel_source=cli", admin_filter({"cancel_source__exact": "cli"})),
    ("admin list ?health=lease_expired", admin_filter({"health": "lease_expired"})),
    ("admin list ?created_at: the last 7 days", admin_filter({"created_at__gte": WEEK_AGO})),
    ("admin list ?parent: not empty", admin_filter({"parent__isempty": "0"})),
    ("admin search 'order #42'", admin_filter({"q": "order #42"})),
    ("admin search an id prefix", admin_filter({"q": "3fa8"})),
    ("admin run page", admin_run_page),
    ("admin operations page", admin_operations),
    ("GET /api/runs/ (staff)", api("/api/runs/")),
    ("GET /api/runs/ (a user)", api("/api/runs/", "user")),
    ("GET /api/runs/?status=cancelled", api("/api/runs/", params={"status": "cancelled"})),
    ("GET /api/runs/?page=3", api("/api/runs/", params={"page": "3"})),
    ("GET /api/runs/ next, next", api_third_page),
    ("GET /api/runs/{id}/", api("/api/runs/{run}/")),
    ("GET /api/runs/{id}/events/", api("/api/runs/{run}/events/")),
    ("GET /api/threads/", api("/api/threads/")),
    ("GET /api/budgets/", api("/api/budgets/")),
    ("playground", api("/playground/", "user")),
    ("playground search", api("/playground/", "user", {"q": "order #42"})),
    ("playground search an id prefix", api("/playground/", "user", {"q": "3fa8"})),
    ("playground search, page 3", api("/playground/", "user", {"q": "order", "page": "3"})),
    ("POST /lg/threads/search", lg_thread_search),
    ("GET /metrics", api("/metrics")),
    ("agent_budgets list", command("agent_budgets", "list")),
    ("agent_reap --dry-run", command("agent_reap", "--dry-run")),
]


def timed(measure: Callable[[], Any], repeat: int) -> float:
    """The median of ``repeat`` calls after one to warm up, in milliseconds."""
    measure()
    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        measure()
        samples.append(time.perf_counter() - started)
    return statistics.median(samples) * 1000


def hot_path(samples: int) -> dict[str, float]:
    """The step boundary (``store.leases.record_step`` on a running run) and
    ``AgentRuntime.cancel`` of running runs: medians in milliseconds."""
    from django.utils import timezone

    from nrllm_agents import store
    from nrllm_agents.domain.steps import Step, StepKind
    from nrllm_agents.models import AgentRun, RunStatus
    from nrllm_agents.runtime.agent_runtime import AgentRuntime
    from nrllm_agents.store import leases

    def running() -> AgentRun:
        return AgentRun.objects.create(
            status=RunStatus.RUNNING,
            prompt="bench",
            provider="scripted",
            claimed_by="bench",
            lease_expires=store.lease_until(),
        )

    run = running()
    boundaries = []
    for sequence in range(samples + 20):
        step = Step(kind=StepKind.LLM, round=sequence, payload={"content": "x" * 100}, duration_ms=1.0)
        started = time.perf_counter()
        leases.record_step(run.pk, "bench", sequence, step, timezone.now())
        boundaries.append(time.perf_counter() - started)
    runtime, cancels = AgentRuntime(), []
    for run in [running() for _ in range(samples + 5)]:
        started = time.perf_counter()
        assert runtime.cancel(run.pk, source="system").outcome == "cancelled"
        cancels.append(time.perf_counter() - started)
    return {
        "step boundary (record_step)": statistics.median(boundaries[20:]) * 1000,
        "AgentRuntime.cancel (running run)": statistics.median(cancels[5:]) * 1000,
    }


def measure_all(bench: Bench, repeat: int, samples: int, only: list[str] | None = None) -> dict[str, float]:
    """Every surface, then the hot path; with ``only``, the surfaces whose name holds one of
    those words, and no hot path."""
    out = {}
    for name, measure in SURFACES:
        if only and not any(word in name for word in only):
            continue
        out[name] = timed(lambda m=measure: m(bench), repeat)  # type: ignore[misc]
        print(f"  {name}: {out[name]:.1f} ms", flush=True)
    if not only:
        out.update(hot_path(samples))
    return out


def bytes_per_step() -> float:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_total_relation_size('nrllm_agents_agentrunevent'), count(*) FROM nrllm_agents_agentrunevent"
        )
        size, n = cursor.fetchone()
    return size / max(n, 1)


@contextlib.contextmanager
def stopwatch(what: str) -> Iterator[None]:
    started = time.perf_counter()
    yield
    print(f"  {what}: {time.perf_counter() - started:.1f} s", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1_000_000, help="runs at the large size (default 1,000,000)")
    parser.add_argument("--steps", type=int, default=8, help="steps per run (default 8)")
    parser.add_argument("--repeat", type=int, default=5, help="requests per surface, after one warm-up (default 5)")
    parser.add_argument("--samples", type=int, default=200, help="step boundaries and cancels timed (default 200)")
    parser.add_argument("--database", default="nrllm_bench_volume", help="the throwaway database's name")
    parser.add_argument(
        "--only", action="append", help="time only the surfaces whose name holds this (repeatable; no hot path)"
    )
    args = parser.parse_args()
    if args.runs <= SMALL:
        sys.exit(f"--runs must be more than {SMALL}")
    production_settings()
    with throwaway_database(args.database):
        run(args)


def run(args: argparse.Namespace) -> None:
    from django.contrib.auth import get_user_model
    from django.test.utils import setup_test_environment
    from django.utils import timezone

    from nrllm_agents.testing import volume

    setup_test_environment()  # the test client's host is allowed; DEBUG stays off
    model = get_user_model()
    users = [model.objects.create_user(f"user{i}") for i in range(USERS)]
    staff = model.objects.create_superuser("bench-staff", "", "x")
    base = timezone.now()
    n, small = args.runs, SMALL
    print(f"volume: {small:,} runs, then {n:,}; {args.steps} steps a run; load average {os.getloadavg()}", flush=True)
    pks = [u.pk for u in users]
    with stopwatch(f"fill {small:,} runs"):
        with volume.indexes_set_aside("nrllm_agents_agentrun", "nrllm_agents_agentrunevent"):
            volume.fill(n - small + 1, n, top=n, steps=args.steps, users=pks, base=base)
        volume.vacuum()
    bench = Bench(users, staff)
    from nrllm_agents.models import AgentRun

    bench.newest = AgentRun.objects.order_by("-created_at").values_list("pk", flat=True).first()
    load_small = os.getloadavg()
    at_small = measure_all(bench, args.repeat, args.samples, args.only)
    per_step_small = bytes_per_step()
    with stopwatch(f"fill the other {n - small:,} runs"):
        with volume.indexes_set_aside("nrllm_agents_agentrun", "nrllm_agents_agentrunevent"):
            step = 250_000
            for lo in range(1, n - small + 1, step):
                volume.fill(lo, min(lo + step - 1, n - small), top=n, steps=args.steps, users=pks, base=base)
        volume.vacuum()
    load_big = os.getloadavg()
    at_big = measure_all(bench, args.repeat, args.samples, args.only)
    per_step_big = bytes_per_step()
    print(f"\nload average: {load_small[0]:.1f} ({small:,}) / {load_big[0]:.1f} ({n:,}) over the last minute")
    print(f"step table: {per_step_small:.0f} bytes per step ({small:,} runs), {per_step_big:.0f} ({n:,})\n")
    width = max(len(name) for name in at_small)
    print(f"| {'surface':<{width}} | {small:>9,} | {n:>11,} | ratio |")
    print(f"|{'-' * (width + 2)}|{'-' * 11}:|{'-' * 13}:|------:|")
    for name in at_small:
        a, b = at_small[name], at_big[name]
        print(f"| {name:<{width}} | {a:7.1f} ms | {b:9.1f} ms | {b / a:4.2f}× |")


if __name__ == "__main__":
    main()
