"""How long one cancel of a tree's root takes to stop every leaf's call in flight.

Each round builds a tree of depth 3 (``--fan-out`` F: 1 + F + F² runs) whose F² leaves stream a
slow answer, executed by real ``manage.py agent_worker`` processes (``--workers``), waits until
every leaf is streaming, and cancels the root (``AgentRuntime.cancel``, from this process). Per
leaf it measures ``stopped_at − the moment the root's cancel COMMIT returned``: the leaf's
interrupted model step ends at its ``stopped_at`` (stamped when that step was recorded). It also
gives the same from the root's ``cancel_requested_at``, stamped inside the cancel's transaction
(so it adds the transaction's time). Prints p50, p99 and max over every leaf of every round, and
whether any model call or tool started after a run's stop (the call journal the workers write).
No assertions.

PostgreSQL (``DATABASE_URL`` names the server; the benchmark creates, migrates and drops its own
database) and Redis (``--redis-url``, flushed: use a db of its own)::

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres .venv/bin/python bench/tree_cancel.py

``--sqlite``: the embedded default instead, a throwaway SQLite file and the in-process executor
(the runs are threads of this process; no Redis, no worker)::

    .venv/bin/python bench/tree_cancel.py --sqlite
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from cancel_latency import percentile  # noqa: E402  (bench/ is this script's directory)
from step_overhead import production_settings, throwaway_database  # noqa: E402


@contextlib.contextmanager
def sqlite_database(workdir: str) -> Iterator[str]:
    """A throwaway SQLite file, migrated, with the in-process executor; yields its URL."""
    url = f"sqlite:///{workdir}/bench.sqlite3"
    os.environ.update({"DATABASE_URL": url, "NRLLM_EXECUTOR": "local"})
    os.environ.pop("REDIS_URL", None)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0, interactive=False)
    yield url


def cancel_committing(cancel: Callable[[], object]) -> float:
    """Run ``cancel`` and return when (Unix time) its transaction's COMMIT returned: the first
    commit of the default connection meanwhile (its hooks run after, in autocommit)."""
    from django.db import connections

    conn = connections["default"]
    real, marks = conn.commit, []

    def commit() -> None:
        real()
        marks.append(time.time())

    conn.commit = commit
    try:
        cancel()
    finally:
        del conn.commit
    return marks[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--fan-out", type=int, default=4, help="F: sub-agent calls per turn (F² leaves)")
    parser.add_argument("--workers", type=int, default=2, help="agent_worker processes")
    parser.add_argument("--concurrency", type=int, default=16, help="slots per worker")
    parser.add_argument("--database", default="nrllm_bench_tree", help="throwaway database to create and drop")
    parser.add_argument("--redis-url", default=os.environ.get("NRLLM_BENCH_REDIS_URL", "redis://127.0.0.1:6379/12"))
    parser.add_argument("--sqlite", action="store_true", help="SQLite and the in-process executor, no workers")
    args = parser.parse_args()

    production_settings()
    with contextlib.ExitStack() as stack:
        workdir = stack.enter_context(tempfile.TemporaryDirectory(prefix="nrllm-tree-bench-"))
        journal_path = Path(workdir) / "journal.jsonl"
        if args.sqlite:
            os.environ["NRLLM_CALL_JOURNAL"] = str(journal_path)  # this process executes the runs
            url = stack.enter_context(sqlite_database(workdir))
        else:
            import redis

            os.environ["REDIS_URL"] = args.redis_url
            redis.Redis.from_url(args.redis_url).flushdb()
            url = stack.enter_context(throwaway_database(args.database))
        from nrllm_agents.catalog import agents
        from nrllm_agents.models import AgentRun, AgentRunEvent, CancelSource, RunStatus
        from nrllm_agents.runtime.agent_runtime import AgentRuntime
        from tests.e2e.processes import Workers, wait_for

        env = {k: v for k, v in os.environ.items() if k != "NRLLM_CALL_JOURNAL"}
        env.update(
            {
                "DATABASE_URL": url,
                "REDIS_URL": args.redis_url,
                "NRLLM_CALL_JOURNAL": str(journal_path),
                "DJANGO_SETTINGS_MODULE": "config.settings",
                "PYTHONPATH": str(ROOT),
            }
        )
        f = args.fan_out

        def calls(name: str) -> dict:
            return {"tool_calls": [{"name": name, "arguments": {"prompt": f"part {i}"}} for i in range(f)]}

        scripted = {"provider": "scripted", "tools": []}
        agents.save("leaf", {**scripted, "script": [{"delay": 60, "content": "slow " * 200}]})
        agents.save("mid", {**scripted, "script": [calls("leaf"), {"content": "m"}], "agents": ["leaf"]})
        agents.save("root", {**scripted, "script": [calls("mid"), {"content": "r"}], "agents": ["mid"]})
        runtime = AgentRuntime()
        latencies: list[float] = []  # leaf stopped_at - the COMMIT of the root's cancel
        from_stamp: list[float] = []  # leaf stopped_at - the root's cancel_requested_at (in the transaction)
        commits: list[float] = []  # the root's cancel_requested_at -> its COMMIT
        roots: list[str] = []
        workers = Workers(
            env,
            count=args.workers,
            log_dir=Path(workdir),
            command="agent_worker",
            extra_args=("--concurrency", str(args.concurrency)),
        )
        try:
            if not args.sqlite:
                workers.start()
            for _ in range(args.rounds):
                root = runtime.enqueue({"agent": "root", "prompt": "bench"})
                roots.append(str(root))
                leaves = AgentRunEvent.objects.filter(run__tree_root_id=root, run__tree_depth=2, kind="request")
                wait_for(lambda: leaves.count() == f * f, timeout=120, interval=0.05, what="every leaf streaming")
                time.sleep(0.2)  # well into the stream
                committed_at = cancel_committing(lambda: runtime.cancel(root, source=CancelSource.API, reason="bench"))
                tree = AgentRun.objects.filter(tree_root_id=root)
                wait_for(lambda: not tree.filter(stopped_at__isnull=True).exists(), timeout=60, what="the tree")
                stamped_at = AgentRun.objects.get(pk=root).cancel_requested_at.timestamp()
                for leaf in tree.filter(tree_depth=2):
                    assert leaf.status == RunStatus.CANCELLED
                    latencies.append((leaf.stopped_at.timestamp() - committed_at) * 1000)
                    from_stamp.append((leaf.stopped_at.timestamp() - stamped_at) * 1000)
                commits.append((committed_at - stamped_at) * 1000)
        finally:
            if not args.sqlite:
                workers.stop()
        started_after = 0
        stops = {
            str(r.pk): r.stopped_at.timestamp()
            for r in AgentRun.objects.filter(tree_root_id__in=roots).exclude(stopped_at=None)
        }
        if journal_path.exists():
            for line in journal_path.read_text().splitlines():
                entry = json.loads(line)
                stop = stops.get(str(entry.get("run_id")))
                if stop is not None and entry.get("t", 0) > stop:
                    started_after += 1
    where = "threads of this process on SQLite" if args.sqlite else f"{args.workers} agent_worker processes"
    print(
        f"tree_cancel: {args.rounds} rounds, trees of 1 + {f} + {f * f} runs on {where}; "
        f"root cancel commit -> leaf stopped_at over {len(latencies)} leaves: "
        f"p50 {percentile(latencies, 0.5):.1f} ms, p99 {percentile(latencies, 0.99):.1f} ms, "
        f"max {max(latencies):.1f} ms; from the cancel's stamp in its transaction (cancel_requested_at): "
        f"p50 {percentile(from_stamp, 0.5):.1f} ms, p99 {percentile(from_stamp, 0.99):.1f} ms "
        f"(stamp -> commit p50 {percentile(commits, 0.5):.1f} ms); calls started after a run's stop: {started_after}"
    )


if __name__ == "__main__":
    main()
