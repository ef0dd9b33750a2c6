"""AG-UI streams cut at random points and reattached (issue 49): what a reattach costs, and that
nothing is lost or repeated.

Runs execute in this process (the in-process executor) on a throwaway database; each is streamed
through ``POST /ag-ui/agents/<name>/`` (Django's test client), the stream dropped after a random
number of chunks, and reattached with ``Last-Event-ID`` (the same ``runId``), again and again until
``RUN_FINISHED``. Every run's events, put together, are checked against its stored steps: the text
of each message is the stored answer, each tool call and result comes once, no event id twice.
Prints the reattach time (request -> first chunk) p50/p99, and the counts. No assertions.

PostgreSQL only::

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres .venv/bin/python bench/ag_ui_reattach.py --runs 20
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from step_overhead import throwaway_database  # noqa: E402  (bench/ is this script's directory)

ANSWER = "The answer comes in pieces, one word after another, as a model writes it. " * 4
SCRIPT = [
    {"tool_calls": [{"name": "calculator", "arguments": {"expression": "2+3"}}]},
    {"content": ANSWER, "delay": 1.5},
]


def one_run(client: Any, rng: random.Random, cuts: int) -> tuple[list[float], int]:
    from nrllm_agents.models import AgentRun
    from nrllm_agents.testing.ag_ui import from_snapshot, parse, problems

    thread, run_id = str(uuid.uuid4()), str(uuid.uuid4())
    body = {"threadId": thread, "runId": run_id, "messages": [{"id": "m", "role": "user", "content": "go"}]}
    got: list[tuple[str | None, dict[str, Any]]] = []
    reattach: list[float] = []
    last: str | None = None
    for attempt in range(cuts + 1):
        headers = {"HTTP_LAST_EVENT_ID": last} if last else {}
        began = time.perf_counter()
        response = client.post("/ag-ui/agents/calc/", body, content_type="application/json", **headers)
        if response.status_code != 200:
            sys.exit(f"{response.status_code}: {response.content.decode()}")
        chunks = iter(response.streaming_content)
        keep = rng.randint(1, 4) if attempt < cuts else 1 << 30
        text, finished = "", False
        for n, chunk in enumerate(chunks):
            if n == 0 and attempt:
                reattach.append(time.perf_counter() - began)
            text += chunk.decode()
            if '"RUN_FINISHED"' in text or n + 1 >= keep:
                finished = '"RUN_FINISHED"' in text
                break
        response.close()  # a drop: the run goes on
        fresh = parse(text)[1:]  # after RUN_STARTED
        if last:  # what a resumed stream reopens, the client has already
            while fresh and fresh[0][0] is None and fresh[0][1]["type"] != "RUN_FINISHED":
                fresh.pop(0)
        for _, event in fresh:
            if event["type"] == "MESSAGES_SNAPSHOT":  # the client's messages are these now
                got = from_snapshot(event["messages"])
        got += [(i, e) for i, e in fresh if not e["type"].endswith("SNAPSHOT")]
        ids = [i for i, _ in fresh if i is not None]
        last = ids[-1] if ids else last
        if finished:
            break
    found = problems(got, AgentRun.objects.get(client_runs__client_run_id=run_id))
    if found:
        print(f"run {run_id}: {found}")
    return reattach, len(found)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--cuts", type=int, default=8, help="drops per run (at most)")
    parser.add_argument("--database", default="nrllm_bench_ag_ui", help="the throwaway database's name")
    args = parser.parse_args()
    os.environ["DJANGO_DEBUG"] = "0"
    os.environ.setdefault("DJANGO_SECRET_KEY", "bench-only-" + uuid.uuid4().hex)
    os.environ["DJANGO_ALLOWED_HOSTS"] = "testserver"
    os.environ.pop("REDIS_URL", None)  # the in-process executor
    os.environ["NRLLM_ALLOW_SCRIPTED"] = "1"  # the scripted model writes the answers
    with throwaway_database(args.database):
        from django.contrib.auth import get_user_model
        from django.test import Client
        from rest_framework.authtoken.models import Token

        from nrllm_agents.catalog import agents
        from nrllm_agents.executors import LOCAL

        user = get_user_model().objects.create_user(username="bench")
        agents.save("calc", {"provider": "scripted", "tools": ["calculator"], "script": SCRIPT})
        client = Client(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=user).key}")
        rng = random.Random(49)
        times: list[float] = []
        wrong = 0
        for _ in range(args.runs):
            reattach, found = one_run(client, rng, args.cuts)
            times += reattach
            wrong += bool(found)
        LOCAL.wait_idle(60)
        ordered = sorted(times)
        p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] if ordered else float("nan")
        print(f"runs {args.runs}, reattaches {len(times)}: runs that lost or repeated anything: {wrong}")
        p50 = statistics.median(times)
        print(f"reattach (request -> first chunk): p50 {p50 * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms")


if __name__ == "__main__":
    main()
