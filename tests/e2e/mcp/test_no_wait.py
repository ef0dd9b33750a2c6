"""No request waits on an MCP server (issue 32 item 2), against a real gunicorn (gthread).

One configured server hangs on its listing (ours, ``--hang-listing``). Before, every
``GET /api/tools/`` listed the servers in the request thread: 40 parallel calls by one user
held another user's ``GET /api/runs/`` for 46 s, some answered 500, and the first playground
load took 18 s. Now requests read the process's catalog and a background thread lists.

``transaction=True``: the server process reads the users, tokens and session made here.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request

import pytest
from django.test import Client
from rest_framework.authtoken.models import Token

from nrllm_agents.testing import mcp_servers
from tests.e2e.web.servers import serve

pytestmark = pytest.mark.django_db(transaction=True)

BOUND_SECONDS = 5.0  # generous (a read of the runs takes milliseconds), and far below the 20 s hang
CALLERS = 40


def get(url: str, headers: dict[str, str]) -> tuple[int, float, bytes]:
    """Status, seconds taken and body of one GET (an HTTP error is a status, not a raise)."""
    began = time.monotonic()
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=120) as response:
            return response.status, time.monotonic() - began, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, time.monotonic() - began, exc.read()


def p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


def test_a_server_hanging_on_its_listing_holds_no_request(child_env, tmp_path, django_user_model):
    document = {"mcpServers": {"hangs": mcp_servers.ours(switches=("--hang-listing",), connectTimeout=20)}}
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps(document))
    bob = django_user_model.objects.create_user("bob")  # not staff: the one who lists the tools
    alice = django_user_model.objects.create_user("alice")
    bob_auth = {"Authorization": f"Token {Token.objects.create(user=bob).key}"}
    alice_auth = {"Authorization": f"Token {Token.objects.create(user=alice).key}"}
    browser = Client()
    browser.force_login(alice)
    cookie = {"Cookie": f"sessionid={browser.cookies['sessionid'].value}"}

    env = {**child_env, "NRLLM_MCP_CONFIG": str(config)}
    with serve("gunicorn", env, tmp_path, workers=1, threads=8) as base:
        status, took, page = get(f"{base}/playground/", cookie)  # the first load: nothing listed yet
        assert status == 200 and took < BOUND_SECONDS, (status, took)
        assert b"calculator" in page

        tools: list[tuple[int, float, bytes]] = []
        runs: list[tuple[int, float, bytes]] = []
        start = threading.Barrier(CALLERS + 1)
        lock = threading.Lock()

        def list_tools() -> None:
            start.wait()
            answer = get(f"{base}/api/tools/", bob_auth)
            with lock:
                tools.append(answer)

        def read_runs() -> None:
            start.wait()
            for _ in range(30):
                answer = get(f"{base}/api/runs/", alice_auth)
                with lock:
                    runs.append(answer)

        threads = [threading.Thread(target=list_tools) for _ in range(CALLERS)]
        threads.append(threading.Thread(target=read_runs))
        for t in threads:
            t.start()
        for t in threads:
            t.join(180)

        assert len(tools) == CALLERS and len(runs) == 30
        assert all(status in (200, 429) for status, _, _ in tools), sorted(s for s, _, _ in tools)
        assert all(status == 200 for status, _, _ in runs), [s for s, _, _ in runs]
        waited = p99([took for _, took, _ in runs])
        print(f"GET /api/runs/ p99 {waited * 1000:.0f} ms; GET /api/tools/ max {max(t for _, t, _ in tools):.2f} s")
        assert waited < BOUND_SECONDS
        listed = json.loads(next(body for status, _, body in tools if status == 200))
        assert "hangs" in listed["unavailable"] and "calculator" in {t["name"] for t in listed["tools"]}
    (log,) = tmp_path.glob("gunicorn-*.log")  # the server's stderr: its logs only
    assert "never retrieved" not in log.read_text() and "Traceback" not in log.read_text()
