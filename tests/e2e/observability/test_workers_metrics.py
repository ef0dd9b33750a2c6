"""Metrics and JSON logs from a real ``rqworker``: what its work horses count shows up on the web
server's ``/metrics`` (prometheus-client multiprocess mode), and a cancelled queued run leaves JSON
lines with its ``run_id`` for claim, boundary, cancel and acknowledgement.

``transaction=True``: the worker, the server and ``agent_cancel`` are other processes that read
and write the test database over their own connections.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from nrllm_agents.models import AgentRun, AgentRunEvent, RunStatus
from nrllm_agents.runtime.agent_runtime import AgentRuntime
from tests.e2e.processes import ROOT, Workers, wait_for
from tests.e2e.web.servers import free_port, serve

pytestmark = pytest.mark.django_db(transaction=True)

TOKEN = "worker-scrape-token"
SHORT = {
    "prompt": "short",
    "tools": ["calculator", "sleep"],
    "script": [
        {
            "delay": 0.05,
            "usage": {"prompt_tokens": 11, "completion_tokens": 4},
            "tool_calls": [{"name": "sleep", "arguments": {"seconds": 0.05}}],
        },
        {"delay": 0.05, "usage": {"prompt_tokens": 19, "completion_tokens": 2}, "content": "ok"},
    ],
}
LONG = {
    "prompt": "long",
    "tools": ["sleep"],
    "max_iterations": 100,
    "script": [  # ~45 s unless cancelled
        *[{"delay": 0.05, "tool_calls": [{"name": "sleep", "arguments": {"seconds": 0.4}}]} for _ in range(99)],
        {"content": "never reached"},
    ],
}


def samples(text: str) -> dict[tuple[str, tuple], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def json_lines(text: str) -> list[dict]:
    found = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                found.append(json.loads(line))
            except json.JSONDecodeError:
                pass
    return found


@pytest.fixture
def queue(settings, redis_url):
    settings.REDIS_URL = redis_url
    settings.RQ_QUEUES = {"default": {"URL": redis_url}}


def test_worker_metrics_and_json_logs(queue, child_env, redis_url, tmp_path):
    prom_dir = tmp_path / "prometheus"
    prom_dir.mkdir()
    env = {
        **child_env,
        "REDIS_URL": redis_url,
        "PROMETHEUS_MULTIPROC_DIR": str(prom_dir),
        "NRLLM_METRICS_TOKEN": TOKEN,
        "NRLLM_LOG_FORMAT": "json",
        "NRLLM_LOG_LEVEL": "DEBUG",
    }
    runtime = AgentRuntime()
    with Workers(env, count=1, log_dir=tmp_path / "logs") as workers, serve("runserver", env, tmp_path) as base:
        done = [runtime.enqueue(SHORT) for _ in range(2)]
        long_id = runtime.enqueue(LONG)
        wait_for(
            lambda: AgentRunEvent.objects.filter(run_id=long_id, kind="tool").exists(),
            timeout=120,
            what="the long run's first tool step",
        )
        cancel = subprocess.run(
            [sys.executable, str(ROOT / "manage.py"), "agent_cancel", str(long_id), "--reason", "log test"],
            env=env,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert cancel.returncode == 0, cancel.stderr
        wait_for(
            lambda: AgentRun.objects.filter(pk=long_id, stopped_at__isnull=False).exists(),
            timeout=60,
            what="the stop of the cancelled run",
        )
        wait_for(
            lambda: AgentRun.objects.filter(pk__in=done, status=RunStatus.COMPLETED).count() == 2,
            timeout=120,
            what="the two short runs",
        )
        request = urllib.request.Request(f"{base}/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
        with urllib.request.urlopen(request, timeout=30) as response:
            scraped = samples(response.read().decode())
        log = workers.log_text(workers.names[0])

    # What the work horses counted, read by the web server from the shared directory.
    assert (
        scraped[
            ("nrllm_runs_finished_total", (("provider", "scripted"), ("reason", "completed"), ("status", "completed")))
        ]
        == 2
    )
    assert scraped[("nrllm_segments_total", (("outcome", "completed"), ("role", "worker")))] == 2
    assert scraped[("nrllm_segments_total", (("outcome", "cancelled"), ("role", "worker")))] == 1
    assert scraped[("nrllm_step_duration_seconds_count", (("kind", "tool"), ("tool", "sleep")))] >= 3
    assert scraped[
        ("nrllm_tokens_total", (("kind", "prompt"), ("model", "scripted-demo"), ("provider", "scripted")))
    ] == 2 * (11 + 19)
    assert scraped[("nrllm_cancel_stop_seconds_count", ())] == 1
    assert scraped[("nrllm_runs_active", (("status", "running"),))] == 0
    # Three jobs and a command, yet one set of files per process alive at once (worker, its
    # horse, the server, agent_cancel): a later process continues the slot of a dead one.
    identities = {p.name.split("_")[-1].removesuffix(".db") for p in prom_dir.glob("*.db")}
    assert identities and all(i.startswith("slot") for i in identities), sorted(os.listdir(prom_dir))
    assert len(identities) <= 4, sorted(os.listdir(prom_dir))

    # A host without a web server serves the same files with agent_metrics.
    port = free_port()
    exporter = subprocess.Popen(
        [sys.executable, str(ROOT / "manage.py"), "agent_metrics", "--port", str(port)],
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert "serving" in exporter.stdout.readline()
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as response:
            exported = samples(response.read().decode())
    finally:
        exporter.terminate()
        exporter.wait(10)
    assert exported[("nrllm_segments_total", (("outcome", "completed"), ("role", "worker")))] == 2
    assert not any(name == "nrllm_runs_active" for name, _ in exported)  # database gauges: the web's job
    no_dir = subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), "agent_metrics"],
        cwd=ROOT,
        text=True,
        env={k: v for k, v in env.items() if k != "PROMETHEUS_MULTIPROC_DIR"},
        capture_output=True,
        timeout=120,
    )
    assert no_dir.returncode == 2 and "PROMETHEUS_MULTIPROC_DIR" in no_dir.stderr

    # JSON lines with the run id: claim, boundary and acknowledgement from the worker ...
    lines = [x for x in json_lines(log) if x.get("run_id") == str(long_id)]
    events = {x["event"] for x in lines}
    assert {"claim", "boundary", "acknowledge"} <= events, events
    boundary = next(x for x in lines if x["event"] == "boundary")
    assert boundary["segment"].startswith("worker:") and isinstance(boundary["sequence"], int)
    assert {"time", "level", "logger", "message"} <= boundary.keys()
    # ... and the cancel from the process that cancelled.
    cancels = [x for x in json_lines(cancel.stderr) if x.get("event") == "cancel"]
    assert cancels and cancels[0]["run_id"] == str(long_id) and cancels[0]["source"] == "cli"
