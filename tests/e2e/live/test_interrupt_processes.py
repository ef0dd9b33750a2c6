"""Stop means stop, across processes: ``agent_run`` with a streaming model server, and real rqworkers.

The cancel is always committed by this test process, so it reaches the executing process only
through the signal (NOTIFY on PostgreSQL, the poll on SQLite) or, at the latest, the boundary.
"""

from __future__ import annotations

import json
import random
import time
from datetime import timedelta
from pathlib import Path

import pytest

from nrllm_agents.models import AgentRun, AgentRunEvent, CancelSource, RunStatus
from nrllm_agents.runtime.agent_runtime import AgentRuntime
from nrllm_agents.testing.chat_server import ChatCompletionServer
from tests.conftest import manage
from tests.e2e.processes import Workers
from tests.waits import wait_for

# transaction=True everywhere: the executing processes only see committed rows, and we theirs.
pytestmark = pytest.mark.django_db(transaction=True)

SLOW_ANSWER = {
    "content": " ".join(f"token{i}" for i in range(400)),
    "chunk_delay": 0.05,
    "usage": {"prompt_tokens": 12, "completion_tokens": 400},
}


def journal(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def cut_off_mid_stream(server, env: dict[str, str], *options: str) -> tuple[str, list[dict], float, tuple]:
    """``agent_run --json`` with ``options`` streams from ``server``; once five pieces of the answer
    were printed, this process cancels the run. Returns the run id, the pieces printed, when the
    cancel returned, and the child's ``(returncode, stdout, stderr)``."""
    proc = manage("agent_run", "say many tokens", *options, "--tool", "calculator", "--json", env=env)
    try:
        first = json.loads(proc.stdout.readline())
        assert first["event"] == "started", first
        run_id = first["run_id"]
        deltas = []
        while len(deltas) < 5:  # the CLI prints the model's words as they stream in
            line = json.loads(proc.stdout.readline())
            if line["event"] == "delta":
                deltas.append(line)
        AgentRuntime().cancel(run_id, source=CancelSource.SYSTEM, reason="stop it")
        committed = time.time()
        assert server.disconnected.wait(5), "the server never saw the client go away"
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return run_id, deltas, committed, (proc.returncode, out, err)


def test_agent_run_with_the_openai_provider_is_cut_off_mid_stream(child_env):
    """The cancel closes the HTTP connection: the server sees the disconnect at once, the
    partial answer is recorded as an interrupted step, and ``agent_run`` exits 3."""
    with ChatCompletionServer([SLOW_ANSWER], by_turn=True) as server:
        env = {
            **child_env,
            "OPENAI_BASE_URL": server.base_url,
            "OPENAI_API_KEY": "sk-test",
            "NRLLM_CANCEL_POLL_SECONDS": "0.2",
        }
        run_id, deltas, committed, (returncode, out, err) = cut_off_mid_stream(
            server, env, "--provider", "openai", "--model", "slow"
        )
        assert returncode == 3, (out, err)
        log = server.streams[0]
        assert not log.finished and log.disconnected_at is not None
        assert log.disconnected_at - committed < 1.0
        # Almost nothing was generated after the cancel: the stream stopped within a few pieces.
        late = [t for t, _ in log.sent if t > committed]
        assert len(late) <= 5, f"{len(late)} pieces sent after the cancel committed"
    events = list(AgentRunEvent.objects.filter(run_id=run_id).order_by("sequence"))
    assert [e.kind for e in events] == ["request", "llm", "cancelled"]
    llm = events[1].payload
    assert llm["interrupted"] is True and llm["content"]
    assert SLOW_ANSWER["content"].startswith(llm["content"])
    assert llm["content"].startswith("".join(d["text"] for d in deltas))
    assert llm["usage_estimated"] is True and llm["usage"]["completion_tokens"] > 0
    run = AgentRun.objects.get(pk=run_id)
    assert run.status == RunStatus.CANCELLED and run.completion_tokens == llm["usage"]["completion_tokens"]


def long_script(rounds: int = 4) -> list[dict]:
    """Long steps of both kinds: 5 s model calls that answer with a 5 s ``sleep``."""
    turn = {"delay": 5, "tool_calls": [{"name": "sleep", "arguments": {"seconds": 5}}]}
    return [turn] * rounds + [{"content": "done"}]


def test_queued_runs_cancelled_at_random_moments_stop_within_milliseconds(child_env, redis_url, tmp_path, settings):
    """Real rqworkers execute runs whose every step takes 5 s; each is cancelled at a random
    moment. Every one stops long before its step would have ended, with the step in flight
    recorded as interrupted, and nothing starts after the cancel (call journal)."""
    settings.REDIS_URL = redis_url
    settings.RQ_QUEUES = {"default": {"URL": redis_url}}
    env = {**child_env, "REDIS_URL": redis_url, "NRLLM_CANCEL_POLL_SECONDS": "0.2"}
    rng = random.Random(7)
    runtime = AgentRuntime()
    with Workers(env, count=2, log_dir=tmp_path / "logs").start():
        run_ids = [runtime.enqueue({"prompt": "p", "tools": ["sleep"], "script": long_script()}) for _ in range(6)]
        for run_id in run_ids:
            wait_for(lambda: AgentRunEvent.objects.filter(run_id=run_id).exists(), what="the run to start a long step")
            time.sleep(rng.uniform(0.1, 4.0))  # a random moment inside a 5 s step
            runtime.cancel(run_id, source=CancelSource.SYSTEM, reason="random moment")
        for run_id in run_ids:
            wait_for(
                lambda: AgentRun.objects.filter(pk=run_id, stopped_at__isnull=False).exists(),
                timeout=30,
                what="the run to stop",
            )
    entries = journal(Path(child_env["NRLLM_CALL_JOURNAL"]))
    for run_id in run_ids:
        run = AgentRun.objects.get(pk=run_id)
        assert run.status == RunStatus.CANCELLED
        assert run.stopped_at - run.cancel_requested_at < timedelta(seconds=1), "stopped well within a step"
        kinds = list(AgentRunEvent.objects.filter(run_id=run_id).order_by("sequence").values_list("kind", "payload"))
        assert kinds[-1][0] == "cancelled"
        assert kinds[-1][1].get("interrupted") is True, kinds
        assert kinds[-2][1].get("interrupted") is True
        started_late = [
            e for e in entries if e.get("run_id") == str(run_id) and e["t"] > run.cancel_requested_at.timestamp()
        ]
        assert started_late == [], f"run {run_id}: {started_late} started after the cancel"
