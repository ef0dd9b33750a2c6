"""Issue 20 item 4: a burst of parallel requests against a real gunicorn (2 processes × 16
threads) passes the rate limit at most N (+ 10 %) times, counted in the database and in Redis.

Guards: DRF's throttles read the cache, then wrote it, so parallel requests all saw room left:
60 parallel creates against 20/min were all accepted, 250 against 120/min 231, and 600 cancels
against 300/min 489. Repeated (``race_rounds``), each round with a user of its own.

``transaction=True``: the server processes read the users and tokens made here.
"""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
import uuid
from collections import Counter

import pytest
from rest_framework.authtoken.models import Token

from nrllm_agents.models import AgentRun
from tests.conftest import race_rounds
from tests.e2e.web.servers import serve

pytestmark = pytest.mark.django_db(transaction=True)


def burst(requests: list[urllib.request.Request]) -> Counter[int]:
    """Send every request at once, one thread each; count the statuses."""
    start = threading.Barrier(len(requests))
    statuses: list[int] = []
    lock = threading.Lock()

    def send(request: urllib.request.Request) -> None:
        start.wait()
        try:
            with urllib.request.urlopen(request, timeout=120) as response:
                status = response.status
        except urllib.error.HTTPError as exc:
            status = exc.code
        with lock:
            statuses.append(status)

    threads = [threading.Thread(target=send, args=(r,)) for r in requests]
    for t in threads:
        t.start()
    for t in threads:
        t.join(180)
    assert len(statuses) == len(requests)
    return Counter(statuses)


def post(base: str, path: str, token: str, body: dict) -> urllib.request.Request:
    return urllib.request.Request(
        base + path,
        data=json.dumps(body).encode(),
        headers={"Authorization": f"Token {token}", "Content-Type": "application/json"},
        method="POST",
    )


@pytest.fixture(params=["database", "redis"])
def store_env(request, child_env):
    """The server's environment with the rate limits counted in ``database`` or ``redis``."""
    env = {**child_env, "NRLLM_RATE_LIMIT_STORE": request.param, "NRLLM_QUEUED_SWEEP_SECONDS": "0"}
    if request.param == "redis":
        env["REDIS_URL"] = request.getfixturevalue("redis_url")  # queued runs then wait in Redis
    return env


def user_token(django_user_model, name: str) -> str:
    return Token.objects.create(user=django_user_model.objects.create_user(name)).key


@pytest.mark.parametrize(("allowed", "attempts"), [(20, 60), (120, 250)])
def test_a_burst_of_creates_is_accepted_at_most_the_limit(store_env, tmp_path, django_user_model, allowed, attempts):
    env = {**store_env, "NRLLM_THROTTLE_CREATE": f"{allowed}/min"}
    body = {"prompt": "p", "tools": [], "script": [{"content": "ok"}]}
    with serve("gunicorn", env, tmp_path, workers=2, threads=16) as base:
        for round_ in range(race_rounds(2)):
            token = user_token(django_user_model, f"burst-{allowed}-{round_}")
            statuses = burst([post(base, "/api/runs/", token, body) for _ in range(attempts)])
            assert set(statuses) <= {202, 429}, statuses
            assert 0 < statuses[202] <= allowed * 1.1, statuses
            assert AgentRun.objects.filter(owner__username=f"burst-{allowed}-{round_}").count() == statuses[202]


def test_a_burst_of_cancels_passes_at_most_the_limit(store_env, tmp_path, django_user_model):
    allowed, attempts = 40, 150
    env = {**store_env, "NRLLM_THROTTLE_CANCEL": f"{allowed}/min"}
    with serve("gunicorn", env, tmp_path, workers=2, threads=16) as base:
        for round_ in range(race_rounds(2)):
            token = user_token(django_user_model, f"cancels-{round_}")
            # Single cancels of runs that do not exist (404 once past the limit) and bulk cancels
            # (200) spend the same allowance.
            requests = [
                post(base, f"/api/runs/{uuid.uuid4()}/cancel/", token, {})
                if i % 3
                else post(base, "/api/runs/cancel/", token, {"status": ["queued"], "dry_run": True})
                for i in range(attempts)
            ]
            statuses = burst(requests)
            assert set(statuses) <= {200, 404, 429}, statuses
            passed = statuses[200] + statuses[404]
            assert 0 < passed <= allowed * 1.1, statuses
