"""The worker class a host names on the command line, as docs/operations/workers.md writes it:
``rqworker --worker-class nrllm_agents.workers.ThreadedWorker`` (a public path) executes a
queued run. ``RQ["WORKER_CLASS"]``'s public path, ``nrllm_agents.workers.GracefulWorker``, is the
demo project's setting, which every ``rqworker`` of the e2e tests runs with.

``transaction=True``: the worker is another process; it only sees committed rows.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

from nrllm_agents.models import AgentRun, RunStatus
from tests.conftest import ROOT, manage

pytestmark = pytest.mark.django_db(transaction=True)

PAGE = ROOT / "docs" / "operations" / "workers.md"


def test_rqworker_with_the_documented_worker_class_executes_a_queued_run(runtime, queue, worker_env) -> None:
    [command] = re.findall(r"`(rqworker --worker-class [^`]+)`", PAGE.read_text())
    assert command == "rqworker --worker-class nrllm_agents.workers.ThreadedWorker"
    script = [{"tool_calls": [{"name": "calculator", "arguments": {"expression": "6*7"}}]}, {"content": "42"}]
    run_id = runtime.enqueue({"prompt": "6*7?", "tools": ["calculator"], "script": script})
    # --burst: the worker takes what the queue holds, executes it, and exits
    worker = manage(*shlex.split(command), "--burst", env=worker_env)
    out, err = worker.communicate(timeout=60)
    assert worker.returncode == 0, err
    run = AgentRun.objects.get(pk=run_id)
    assert (run.status, run.final_text) == (RunStatus.COMPLETED, "42"), err
    # the threaded worker executes in its own process (a forking worker's calls come from a child)
    calls = [json.loads(line) for line in Path(worker_env["NRLLM_CALL_JOURNAL"]).read_text().splitlines()]
    assert calls and {call["pid"] for call in calls} == {worker.pid}
