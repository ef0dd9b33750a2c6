"""Issue 20 item 7: one user's ``mode: sync`` runs cannot take every thread of a real gunicorn.

Guards: sync runs had no cap, so 16 parallel sync runs of 20 s held all 16 threads of the
README's ``gunicorn -k gthread --threads 16`` and every other user waited. Now a user holds at
most ``NRLLM_SYNC_MAX_PER_USER`` of them; the others get 429 at once, and other users are served.

``transaction=True``: the server reads the tokens made here and executes the runs.
"""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request

import pytest
from rest_framework.authtoken.models import Token

from nrllm_agents.models import ACTIVE, AgentRun, CancelSource, RunStatus
from nrllm_agents.runtime.agent_runtime import AgentRuntime
from tests.conftest import race_rounds
from tests.e2e.processes import wait_for
from tests.e2e.web.servers import serve

pytestmark = pytest.mark.django_db(transaction=True)

LONG = {"prompt": "p", "tools": [], "mode": "sync", "script": [{"delay": 60, "content": "never"}]}


def call(base: str, token: str, method: str = "GET", body: dict | None = None) -> int:
    request = urllib.request.Request(
        f"{base}/api/runs/",
        data=None if body is None else json.dumps(body).encode(),
        headers={"Authorization": f"Token {token}", "Content-Type": "application/json"},
        method=method,
    )
    try:
        with urllib.request.urlopen(request, timeout=300) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_one_users_sync_runs_leave_threads_for_everyone_else(child_env, tmp_path, django_user_model):
    env = {**child_env, "NRLLM_SYNC_MAX_PER_USER": "2", "NRLLM_QUEUED_SWEEP_SECONDS": "0"}
    bob = Token.objects.create(user=django_user_model.objects.create_user("bob")).key
    runtime = AgentRuntime()
    with serve("gunicorn", env, tmp_path, threads=8) as base:
        for round_ in range(race_rounds(2)):
            name = f"alice-{round_}"
            alice = Token.objects.create(user=django_user_model.objects.create_user(name)).key
            statuses: list[int] = []
            start = threading.Barrier(8)

            def send(token: str = alice) -> None:
                start.wait()
                statuses.append(call(base, token, "POST", LONG))

            threads = [threading.Thread(target=send) for _ in range(8)]
            for t in threads:
                t.start()
            # Six refused at once, two executing (and holding their threads) ...
            wait_for(lambda: statuses.count(429) == 6, timeout=120, what="six refusals of alice's sync runs")
            running = AgentRun.objects.filter(owner__username=name, status=RunStatus.RUNNING)
            wait_for(lambda: running.count() == 2, timeout=120, what="alice's two sync runs")
            # ... while bob is served, and alice may still queue.
            assert call(base, bob) == 200
            assert running.count() == 2
            assert call(base, alice, "POST", {**LONG, "mode": "queued"}) == 202
            for run in AgentRun.objects.filter(owner__username=name, status__in=ACTIVE):
                runtime.cancel(run.pk, source=CancelSource.API, reason="test over")
            for t in threads:
                t.join(120)
            assert sorted(statuses) == [201, 201, 429, 429, 429, 429, 429, 429]
