"""Live streams at scale: push (LISTEN/NOTIFY) against polling, side by side in one run.

For each mode the app is served by a real uvicorn process (``config.asgi``) on a throwaway
database, with ``NRLLM_STREAM_PUSH=1`` (push) or ``0`` (poll every 0.2 s, as before issue 11),
and W watchers (asyncio clients in this process) hold ``GET /api/runs/<id>/stream/`` open on
one running run. It measures:

- commit -> client: this process appends steps to the run (the runtime's boundary statement,
  ``store.record_step``), notes when each COMMIT returned, and every watcher notes when the
  step's frame arrived; p50 and p99 over all (watcher, step) pairs, for W = 1, 100, 500;
- queries per second with 100 idle watchers (the run writes nothing): transactions counted by
  PostgreSQL (``pg_stat_database``) over a window, minus this script's own;
- connections held by the server while 500 watchers are idle (``pg_stat_activity``);
- first model token -> client: runs executed here by the runtime (scripted provider writing its
  answer over 1 s), each watched by one client; from the first piece handed to the publisher
  to its arrival as ``event: delta`` (push) or, polling, to the arrival of the llm step that
  carries the text (there are no deltas without push).

With ``--idle-worker REDIS_URL`` it measures instead what idle costs with a worker (issue 44, item
17): one worker (``--idle-worker-command``: ``rqworker``, or ``agent_worker``) executes one run
whose only step in flight is a 60 s model call, and the database's transactions per second are
counted over a window with no watcher, then with ``--idle-watchers`` (30) idle SSE watchers of
that run, and with no worker and no watcher (the floor: this script's own counter reads). Nothing
is written meanwhile (the run renews its lease only at its boundaries), so every transaction
counted is a periodic one.

Before all that, what being watched costs the step boundary itself: the boundary statement
(``store.record_step``) timed on a run nobody watches and on a watched one (its step is then
handed to this process's publisher, which announces it after the commit), alternating blocks.
No boundary notifies any more (migration ``0010_targeted_push``); before, a trigger sent a
``NOTIFY`` from every boundary, watched or not.

PostgreSQL only. ``DATABASE_URL`` names the server; a throwaway database is created, migrated
and dropped (``nrllm_bench_fanout`` unless ``--database``). Numbers only; no assertions::

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres .venv/bin/python bench/stream_fanout.py
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from step_overhead import production_settings, throwaway_database  # noqa: E402  (bench/ is this script's directory)

SERVER_APP = "nrllm-bench-server"
WORKER_APP = "nrllm-bench-worker"


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))] * 1000 if ordered else float("nan")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def server(url: str, push: bool, workdir: Path, kind: str = "uvicorn") -> Iterator[int]:
    """uvicorn (or gunicorn: 2 processes of 32 threads, as deployed) on ``url`` (its connections
    named ``SERVER_APP``); yields its port."""
    port = free_port()
    env = {
        **os.environ,
        "DATABASE_URL": f"{url}?application_name={SERVER_APP}",
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "NRLLM_STREAM_PUSH": "1" if push else "0",
        "NRLLM_STREAM_MAX_OPEN": "0",
        "NRLLM_STREAM_MAX_PER_USER": "0",
        "NRLLM_STREAM_HEARTBEAT_SECONDS": "30",
        "NRLLM_STREAM_MAX_SECONDS": "3600",
        "PYTHONPATH": str(ROOT),
    }
    env.pop("REDIS_URL", None)
    log = open(workdir / f"{kind}-{'push' if push else 'poll'}.log", "wb")
    uvicorn = [
        *("-m", "uvicorn", "config.asgi:application", "--host", "127.0.0.1", "--port", str(port)),
        *("--lifespan", "off", "--no-access-log", "--log-level", "warning", "--backlog", "2048"),
        *("--timeout-graceful-shutdown", "1"),
    ]
    gunicorn = [
        *("-m", "gunicorn", "-k", "gthread", "--workers", "2", "--threads", "32", "--bind", f"127.0.0.1:{port}"),
        *("--log-level", "warning", "--graceful-timeout", "1", "config.wsgi"),
    ]
    proc = subprocess.Popen(
        [sys.executable, *(gunicorn if kind == "gunicorn" else uvicorn)],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            with contextlib.suppress(OSError):
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            if proc.poll() is not None or time.monotonic() > deadline:
                sys.exit(f"{kind} did not start; see {log.name}")
            time.sleep(0.1)
        yield port
    finally:
        stop(proc, log, 10)


class Watcher:
    """One SSE client: notes when each step (by sequence) and each first delta arrived."""

    def __init__(self) -> None:
        self.opened = asyncio.Event()
        self.steps: dict[int, float] = {}
        self.first_delta: float | None = None
        self.first_llm: float | None = None
        self.done = asyncio.Event()

    async def run(self, port: int, path: str, token: str) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(
            f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Token {token}\r\n"
            f"Accept: text/event-stream\r\n\r\n".encode()
        )
        await writer.drain()
        event, data = None, None
        try:
            while True:
                line = await reader.readline()
                if not line:
                    return
                text = line.decode().strip()
                if text.startswith(": stream open"):
                    self.opened.set()
                elif text.startswith("event:"):
                    event = text[6:].strip()
                elif text.startswith("data:"):
                    data = text[5:].strip()
                elif not text and event:
                    now = time.perf_counter()
                    if event == "step":
                        step = json.loads(data or "{}")
                        self.steps.setdefault(step["sequence"], now)
                        if step["kind"] == "llm" and step["payload"].get("content") and self.first_llm is None:
                            self.first_llm = now
                    elif event == "delta" and self.first_delta is None:
                        self.first_delta = now
                    elif event in ("done", "cancelled", "failed", "awaiting_approval"):
                        self.done.set()
                        return
                    event, data = None, None
        finally:
            writer.close()


def db_counters(dsn: str, name: str) -> tuple[int, int]:
    """(transactions so far, connections the server holds) for database ``name``."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        xacts = conn.execute(
            "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = %s", [name]
        ).fetchone()[0]
        held = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND application_name = ANY(%s)",
            [name, [SERVER_APP, "nrllm-cancel-listener"]],
        ).fetchone()[0]
    return xacts, held


@contextlib.contextmanager
def worker(url: str, redis_url: str, command: str, workdir: Path) -> Iterator[subprocess.Popen]:
    """One ``manage.py <command>`` worker (``rqworker`` or ``agent_worker``) on ``url``."""
    env = {
        **os.environ,
        "DATABASE_URL": f"{url}?application_name={WORKER_APP}",
        "REDIS_URL": redis_url,
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "PYTHONPATH": str(ROOT),
    }
    log = open(workdir / f"{command}.log", "wb")
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "manage.py"), command, "default"],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        yield proc
    finally:
        stop(proc, log, 15)


def stop(proc: subprocess.Popen, log: Any, grace: float) -> None:
    """SIGTERM, then after ``grace`` seconds SIGKILL (to its process group, when it leads one)."""
    proc.terminate()
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(grace)
    if proc.poll() is None:
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, 9)
        proc.kill()
        proc.wait(5)
    log.close()


def xacts_per_second(dsn: str, name: str, window: float) -> float:
    """Transactions per second of database ``name`` over ``window`` seconds (minus the read's own)."""
    before, _ = db_counters(dsn, name)
    started = time.monotonic()
    time.sleep(window)
    after, _ = db_counters(dsn, name)
    return max(0, after - before - 1) / (time.monotonic() - started)


async def idle_with_worker(
    port: int, token: str, dsn: str, name: str, run_id: Any, watchers_n: int, window: float, settle: float
) -> tuple[float, float]:
    """(tx/s with no watcher, tx/s with ``watchers_n`` idle watchers) while the run's call waits."""
    await asyncio.sleep(settle)
    alone = await asyncio.to_thread(xacts_per_second, dsn, name, window)
    watchers, tasks = await open_watchers(port, run_id, token, watchers_n)
    await asyncio.sleep(settle)  # the catch-up reads are over, and reported (backends report late)
    watched = await asyncio.to_thread(xacts_per_second, dsn, name, window)
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return alone, watched


def idle_worker_main(args: argparse.Namespace) -> None:
    """``--idle-worker``: what idle costs with a worker executing a run that waits (see the module)."""
    import tempfile

    import redis

    production_settings()  # debug off, as deployed
    redis.Redis.from_url(args.idle_worker).flushdb()
    os.environ["REDIS_URL"] = args.idle_worker  # this process enqueues to the worker
    with throwaway_database(args.database) as url, tempfile.TemporaryDirectory() as tmp:
        from django.contrib.auth import get_user_model
        from rest_framework.authtoken.models import Token

        from nrllm_agents.models import AgentRun, AgentRunEvent, RunStatus
        from nrllm_agents.runtime.agent_runtime import AgentRuntime

        owner = get_user_model().objects.create_user("bench")
        token = Token.objects.create(user=owner).key
        admin_dsn = url.rsplit("/", 1)[0] + "/postgres"
        time.sleep(args.idle_settle)  # the migration's and the setup's counters are reported late
        floor = xacts_per_second(admin_dsn, args.database, args.idle_seconds)
        wait = 60  # the longest scripted call; outlasts both windows at the default settle and window
        script = [{"delay": wait, "tool_calls": [{"name": "calculator", "arguments": {"expression": "1+1"}}]}]
        with (
            server(url, True, Path(tmp), args.idle_server) as port,
            worker(url, args.idle_worker, args.idle_worker_command, Path(tmp)),
        ):
            run_id = AgentRuntime().enqueue({"prompt": "idle", "script": script, "tools": ["calculator"]}, owner=owner)
            deadline = time.monotonic() + 120
            while not AgentRunEvent.objects.filter(run_id=run_id, kind="request").exists():
                if time.monotonic() > deadline:
                    sys.exit(f"the worker never started the run; see {tmp}/{args.idle_worker_command}.log")
                time.sleep(0.2)
            alone, watched = asyncio.run(
                idle_with_worker(
                    port,
                    token,
                    admin_dsn,
                    args.database,
                    run_id,
                    args.idle_watchers,
                    args.idle_seconds,
                    args.idle_settle,
                )
            )
            still = AgentRun.objects.filter(pk=run_id, status=RunStatus.RUNNING).exists()
        print(
            f"stream_fanout --idle-worker: PostgreSQL, {args.idle_server} (push, debug off) and one "
            f"{args.idle_worker_command} executing one "
            f"run whose model call waits {wait:g} s; windows of {args.idle_seconds:g} s"
        )
        print(f"  transactions/s, no worker, no watcher (the counter's floor)   {floor:7.2f}")
        print(f"  transactions/s, the worker, no watcher                        {alone:7.2f}")
        print(f"  transactions/s, the worker, {args.idle_watchers} idle watchers                 {watched:7.2f}")
        print(f"  (the run was still in its call at the end: {still})")


def new_running_run(owner: Any) -> Any:
    from nrllm_agents import store

    return store.begin(
        {"prompt": "bench", "provider": "scripted", "owner": owner},
        claimed_by="bench",
        lease_expires=store.lease_until(),
    )


async def open_watchers(port: int, run_id: Any, token: str, count: int) -> tuple[list[Watcher], list[asyncio.Task]]:
    watchers = [Watcher() for _ in range(count)]
    tasks = [asyncio.create_task(w.run(port, f"/api/runs/{run_id}/stream/", token)) for w in watchers]
    await asyncio.wait_for(asyncio.gather(*(w.opened.wait() for w in watchers)), 120)
    return watchers, tasks


async def latency(port: int, token: str, owner: Any, watchers_n: int, steps: int, gap: float) -> list[float]:
    """Commit -> client for ``steps`` steps seen by ``watchers_n`` watchers."""
    from nrllm_agents import store
    from nrllm_agents.domain import Step, StepKind

    run = await asyncio.to_thread(new_running_run, owner)
    watchers, tasks = await open_watchers(port, run.pk, token, watchers_n)
    committed: dict[int, float] = {}

    def write(sequences: range) -> None:
        from django.db import connections
        from django.utils import timezone

        for seq in sequences:
            store.record_step(run.pk, "bench", seq, Step(StepKind.TOOL, seq, {"n": seq}), timezone.now())
            committed[seq] = time.perf_counter()
            time.sleep(gap)
        connections.close_all()

    async def all_have(count: int) -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and any(len(w.steps) < count for w in watchers):
            await asyncio.sleep(0.05)

    # Warm-up: step 0 reaches everyone once their catch-up reads are done; then steady state.
    await asyncio.to_thread(write, range(0, 1))
    await all_have(1)
    await asyncio.to_thread(write, range(1, steps + 1))
    await all_have(steps + 1)
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return [w.steps[s] - committed[s] for w in watchers for s in range(1, steps + 1) if s in w.steps]


async def idle(
    port: int, token: str, owner: Any, dsn: str, name: str, watchers_n: int, window: float, settle: float = 12.0
) -> tuple[float, int]:
    """(transactions per second, connections held) with ``watchers_n`` idle watchers."""
    run = await asyncio.to_thread(new_running_run, owner)
    watchers, tasks = await open_watchers(port, run.pk, token, watchers_n)
    # A backend reports its counters at most once a second while busy and 10 s after it went
    # idle: let what happened before the window (catch-up reads, earlier scenarios) land first.
    await asyncio.sleep(settle)
    before, _ = await asyncio.to_thread(db_counters, dsn, name)
    started = time.monotonic()
    await asyncio.sleep(window)
    after, held = await asyncio.to_thread(db_counters, dsn, name)
    elapsed = time.monotonic() - started
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return max(0, after - before - 1) / elapsed, held  # -1: the first counter read's own transaction


async def first_token(port: int, token: str, owner: Any, runs: int) -> list[float]:
    """First piece handed to the publisher -> first delta (or, polling, the llm step) at the client."""
    from nrllm_agents.live import deltas
    from nrllm_agents.runtime.agent_runtime import AgentRuntime

    first_publish: dict[str, float] = {}
    original = deltas.publisher.publish

    def timed(delta: dict[str, Any]) -> None:
        first_publish.setdefault(delta["run_id"], time.perf_counter())
        original(delta)

    deltas.publisher.publish = timed  # type: ignore[method-assign]
    script = [
        {"delay": 0.6, "tool_calls": [{"name": "calculator", "arguments": {"expression": "1+1"}}]},
        {"delay": 1.0, "content": " ".join(f"w{i}" for i in range(30))},
    ]
    results = []
    try:
        for _ in range(runs):
            run_id = await asyncio.to_thread(
                lambda: AgentRuntime().enqueue({"prompt": "b", "script": script, "tools": ["calculator"]}, owner=owner)
            )
            watcher = Watcher()
            task = asyncio.create_task(watcher.run(port, f"/api/runs/{run_id}/stream/", token))
            await asyncio.wait_for(watcher.done.wait(), 30)
            arrived = watcher.first_delta or watcher.first_llm
            if arrived is not None and str(run_id) in first_publish:
                results.append(arrived - first_publish[str(run_id)])
            task.cancel()
    finally:
        deltas.publisher.publish = original  # type: ignore[method-assign]
    return results


def boundary_cost(blocks: int = 40, per_block: int = 100) -> tuple[float, float]:
    """p50 of the boundary statement (ms) on a run nobody watches and on a watched one."""
    from django.utils import timezone

    from nrllm_agents import store
    from nrllm_agents.domain import Step, StepKind
    from nrllm_agents.live import deltas
    from nrllm_agents.models import AgentRun

    assert deltas.publisher  # imported: the store hands watched boundaries to it
    run = new_running_run(None)
    times: dict[bool, list[float]] = {True: [], False: []}
    seq = 0
    for block in range(blocks):
        watched = block % 2 == 1
        AgentRun.objects.filter(pk=run.pk).update(watchers=int(watched))
        for _ in range(per_block):
            t = time.perf_counter()
            store.record_step(run.pk, "bench", seq, Step(StepKind.TOOL, 0, {"n": seq}), timezone.now())
            times[watched].append(time.perf_counter() - t)
            seq += 1
    AgentRun.objects.filter(pk=run.pk).update(watchers=0)
    deltas.publisher.flush()
    return statistics.median(times[False]) * 1000, statistics.median(times[True]) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database", default="nrllm_bench_fanout", help="throwaway database to create and drop")
    parser.add_argument("--watchers", default="1,100,500", help="watcher counts for commit -> client")
    parser.add_argument("--steps", type=int, default=20, help="steps appended per latency measurement")
    parser.add_argument("--gap", type=float, default=0.25, help="seconds between appended steps")
    parser.add_argument("--idle-seconds", type=float, default=10.0, help="window of the idle query count")
    parser.add_argument(
        "--poll-max-watchers",
        type=int,
        default=100,
        help="most watchers the polling mode is run with (it holds a connection each)",
    )
    parser.add_argument("--modes", default="poll,push", help="which of poll,push to run")
    parser.add_argument("--token-runs", type=int, default=10, help="runs timed for the first model token")
    parser.add_argument("--idle-worker", default="", help="a Redis URL (flushed): measure idle with a worker instead")
    parser.add_argument("--idle-worker-command", default="rqworker", help="rqworker or agent_worker")
    parser.add_argument("--idle-watchers", type=int, default=30, help="idle watchers of the worker's run")
    parser.add_argument("--idle-server", default="gunicorn", help="gunicorn (gthread, as deployed) or uvicorn")
    parser.add_argument("--idle-settle", type=float, default=12.0, help="seconds before each idle window")
    args = parser.parse_args()
    if args.idle_worker:
        idle_worker_main(args)
        return
    counts = [int(n) for n in args.watchers.split(",")]
    import tempfile

    with throwaway_database(args.database) as url, tempfile.TemporaryDirectory() as tmp:
        from django.contrib.auth import get_user_model
        from rest_framework.authtoken.models import Token

        owner = get_user_model().objects.create_user("bench")
        token = Token.objects.create(user=owner).key
        admin_dsn = url.rsplit("/", 1)[0] + "/postgres"
        off, on = boundary_cost()
        print(f"stream_fanout: PostgreSQL, uvicorn, watchers {counts}, {args.steps} steps each, {args.gap:g} s apart")
        print(f"  boundary statement p50, run not watched / watched: {off:.3f} / {on:.3f} ms ({on / off:.2f}x)")
        rows: dict[str, dict[str, str]] = {}
        for mode in args.modes.split(","):
            with server(url, mode == "push", Path(tmp)) as port:
                row = rows.setdefault(mode, {})
                # Polling holds a connection per watcher: past --poll-max-watchers it would exhaust
                # a shared server (and other people's tests), so it is not measured there.
                limit = max(counts) if mode == "push" else args.poll_max_watchers
                for n in counts:
                    key = f"commit->client p50/p99 ms, {n} watchers"
                    if n > limit:
                        row[key] = "not run"
                        continue
                    lat = asyncio.run(latency(port, token, owner, n, args.steps, args.gap))
                    row[key] = f"{pct(lat, 0.5):7.1f} / {pct(lat, 0.99):7.1f}"
                qps, _ = asyncio.run(idle(port, token, owner, admin_dsn, args.database, 100, args.idle_seconds))
                row["queries/s, 100 idle watchers"] = f"{qps:7.1f}"
                for n in sorted({min(100, max(counts)), max(counts)}):
                    key = f"connections held, {n} idle watchers"
                    if n > limit:
                        row[key] = "not run"
                        continue
                    _, held = asyncio.run(idle(port, token, owner, admin_dsn, args.database, n, 0.5, settle=2.0))
                    row[key] = f"{held:7d}"
                tok = asyncio.run(first_token(port, token, owner, args.token_runs))
                row["first token -> client p50 ms"] = f"{pct(tok, 0.5):7.1f}"
        keys = list(next(iter(rows.values())))
        width = max(len(k) for k in keys)
        print(f"  {'':<{width}}" + "".join(f"   {('poll (before)' if m == 'poll' else m):>17}" for m in rows))
        for key in keys:
            print(f"  {key:<{width}}" + "".join(f"   {rows[m][key]:>17}" for m in rows))
        print("  (polling has no deltas: its first token is the llm step that carries the text)")


if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    os.environ.pop("REDIS_URL", None)  # the timed runs execute in this process
    main()
