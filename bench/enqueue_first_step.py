"""Enqueue → first step on a real ``rqworker``, against a bare RQ job on the same worker.

One ``manage.py rqworker`` process (the project's worker class, ``GracefulWorker``, which forks
a work horse per job like RQ's default) serves both contenders, one job at a time,
alternating:

- ours: ``AgentRuntime.enqueue`` (insert the queued row, dispatch the job once it commits);
  the latency ends when the horse has the run's first step in hand (its ``created_at``, taken
  right before it is recorded);
- the floor: ``queue.enqueue(time.time)``, a bare RQ job whose result is the time its horse
  ran it.

Both are measured from the moment before the enqueue call, on the same clock (one machine).
For ours it also prints where the time goes, from timestamps each stage leaves behind: the
enqueue call returning, the job starting in the horse (``job.started_at``), the claim
(``started_at`` of the run) and the first step.

PostgreSQL and Redis: ``DATABASE_URL`` names the server (a throwaway database is created and
dropped); ``--redis-url`` a Redis database that is **flushed** before and after.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres .venv/bin/python bench/enqueue_first_step.py \\
        --redis-url redis://127.0.0.1:6379/12
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT))
from step_overhead import production_settings, throwaway_database  # noqa: E402  (bench/ is this script's directory)


def p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))] * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=100, help="jobs per contender")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/12", help="a Redis db of its own (flushed)")
    parser.add_argument("--database", default="nrllm_bench_enqueue", help="throwaway database to create and drop")
    args = parser.parse_args()
    production_settings()
    os.environ["REDIS_URL"] = args.redis_url

    import redis

    redis.Redis.from_url(args.redis_url).flushdb()
    with throwaway_database(args.database) as url, tempfile.TemporaryDirectory() as logs:
        import django_rq
        from rq.job import Job

        from nrllm_agents.executors import dispatch
        from nrllm_agents.models import AgentRun, AgentRunEvent
        from nrllm_agents.runtime.agent_runtime import AgentRuntime
        from tests.e2e.processes import Workers

        env = {**os.environ, "DATABASE_URL": url, "REDIS_URL": args.redis_url, "DJANGO_DEBUG": "0"}
        runtime = AgentRuntime()
        queue = django_rq.get_queue("default")
        request = {"prompt": "hi", "tools": [], "script": [{"content": "hello"}]}
        ours: list[float] = []
        bare: list[float] = []
        stages: dict[str, list[float]] = {
            "enqueue call returns": [],
            "job starts in the horse": [],
            "the run is claimed": [],
            "the first step is in hand": [],
        }
        with Workers(env, count=1, log_dir=logs) as _:
            for i in range(args.samples + 5):  # 5 to warm up
                for contender in ("ours", "bare") if i % 2 else ("bare", "ours"):
                    if contender == "bare":
                        t0 = time.time()
                        job = queue.enqueue(time.time, result_ttl=600)
                        result = job.latest_result(timeout=30)
                        assert result is not None and result.type == result.Type.SUCCESSFUL, result
                        if i >= 5:
                            bare.append(result.return_value - t0)
                        continue
                    t0 = time.time()
                    run_id = runtime.enqueue(request)
                    t1 = time.time()
                    job = Job.fetch(dispatch.job_id(run_id, 0), connection=queue.connection)
                    result = job.latest_result(timeout=30)
                    assert result is not None and result.type == result.Type.SUCCESSFUL, result
                    job.refresh()
                    run = AgentRun.objects.get(pk=run_id)
                    first = AgentRunEvent.objects.filter(run_id=run_id, sequence=0).get()
                    if i >= 5:
                        ours.append(first.created_at.timestamp() - t0)
                        marks = [
                            t1,
                            job.started_at.replace(tzinfo=first.created_at.tzinfo).timestamp(),
                            run.started_at.timestamp(),
                            first.created_at.timestamp(),
                        ]
                        for name, mark in zip(stages, marks):
                            stages[name].append(mark - t0)
        redis.Redis.from_url(args.redis_url).flushdb()
    print(
        f"enqueue_first_step: {args.samples} jobs per contender on one rqworker (GracefulWorker, a forked "
        f"horse per job), alternating, DEBUG off"
    )
    print(f"  {'':42} {'mean':>8} {'p50':>8} {'p90':>8}   ms")
    for name, values in (("ours: enqueue -> first step", ours), ("bare RQ job: enqueue -> job runs", bare)):
        print(f"  {name:42} {statistics.fmean(values) * 1000:8.2f} {p(values, 0.5):8.2f} {p(values, 0.9):8.2f}")
    print(
        f"  {'ratio ours / bare':42} {statistics.fmean(ours) / statistics.fmean(bare):7.2f}x "
        f"{p(ours, 0.5) / p(bare, 0.5):7.2f}x"
    )
    print("  where our time goes (p50 of each stage's own duration):")
    previous = [0.0] * len(ours)
    for name, marks in stages.items():
        print(f"    {name:40} {p([m - q for m, q in zip(marks, previous)], 0.5):8.2f}")
        previous = marks


if __name__ == "__main__":
    main()
