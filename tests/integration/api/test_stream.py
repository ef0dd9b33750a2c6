"""The browser stream ``GET /api/runs/<id>/stream/``: framing, resume, heartbeat, auth, and
real servers (uvicorn for ASGI, gunicorn gthread for WSGI) delivering steps unbuffered."""

from __future__ import annotations

import http.client
import json
import uuid
from collections.abc import Iterable, Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest
from asgiref.sync import async_to_sync
from django.test import AsyncClient, Client

from nrllm_agents import store
from nrllm_agents.models import AgentRun, CancelSource, RunStatus
from nrllm_agents.presentation import describe
from nrllm_agents.presentation.presenters import event_dict, run_status_dict
from tests import waits
from tests.e2e.web.servers import serve

FINAL = {"done", "cancelled", "awaiting_approval", "failed"}
FAST = {"STREAM_POLL_SECONDS": 0.02, "STREAM_HEARTBEAT_SECONDS": 30, "STREAM_MAX_SECONDS": 60}
# A run that takes ~8 s unless cancelled: 40 rounds of a 0.2 s sleep tool.
SLOW_SCRIPT = [
    {
        "tool_calls": [{"name": "sleep", "arguments": {"seconds": 0.2}}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 2},
    }
    for _ in range(40)
] + [{"content": "done"}]
QUICK_SCRIPT = [
    {
        "tool_calls": [{"name": "calculator", "arguments": {"expression": "6*7"}}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 3},
    },
    {"content": "42", "usage": {"prompt_tokens": 12, "completion_tokens": 1}},
]


# --- helpers -------------------------------------------------------------------------------
def frames_of(lines: Iterable[str]) -> Iterator[dict[str, Any]]:
    """SSE frames from text lines: ``{"event", "id", "data", "comments"}`` per blank-line block."""
    frame: dict[str, Any] = {"comments": []}
    for line in lines:
        line = line.rstrip("\r\n")
        if not line:
            if set(frame) != {"comments"} or frame["comments"]:
                yield frame
            frame = {"comments": []}
        elif line.startswith(":"):
            frame["comments"].append(line[1:].strip())
        else:
            name, _, value = line.partition(":")
            frame[name] = value[1:] if value.startswith(" ") else value


def lines_of(chunks: Iterable[bytes | str]) -> Iterator[str]:
    buffer = ""
    for chunk in chunks:
        buffer += chunk.decode() if isinstance(chunk, bytes) else chunk
        while "\n" in buffer:
            line, buffer = buffer.split("\n", 1)
            yield line + "\n"


def read_all(response) -> list[dict[str, Any]]:
    return list(frames_of(lines_of(response.streaming_content)))


def steps_in(frames: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [f for f in frames if f.get("event") == "step"]


def stream_url(run_id: Any, query: str = "") -> str:
    return f"/api/runs/{run_id}/stream/{query}"


@pytest.fixture
def fast_stream(settings):
    settings.NRLLM_AGENTS = dict(FAST)
    settings.REDIS_URL = None  # queued runs in these tests execute in this process
    return settings


def session(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def quick_run(runtime, owner, script=QUICK_SCRIPT, tools=("calculator",)) -> AgentRun:
    result = runtime.run({"prompt": "six times seven", "script": script, "tools": list(tools)}, owner=owner)
    return AgentRun.objects.get(pk=result.run_id)


# --- framing -------------------------------------------------------------------------------
@pytest.mark.django_db
def test_frames_carry_each_step_with_its_sequence_then_the_final_event(runtime, alice, fast_stream):
    run = quick_run(runtime, alice)
    response = session(alice).get(stream_url(run.pk))

    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/event-stream")
    assert "no-cache" in response["Cache-Control"]
    assert response["X-Accel-Buffering"] == "no"
    frames = read_all(response)  # returns only because the stream closes after the final event
    stored = [event_dict(e) for e in runtime.events(run.pk)]
    steps = steps_in(frames)
    assert [int(f["id"]) for f in steps] == [s["sequence"] for s in stored] == list(range(len(stored)))
    # The stored step, plus the labelled lines the one describer gives it (what the page shows).
    described = [{**s, "details": describe.lines(s["kind"], s["payload"])} for s in stored]
    assert [json.loads(f["data"]) for f in steps] == json.loads(json.dumps(described))
    final = frames[-1]
    assert final["event"] == "done" and "id" not in final
    run.refresh_from_db()
    words = {"cancel_text": None, "cost_text": "not priced", "pending_text": []}
    assert json.loads(final["data"]) == json.loads(json.dumps({**run_status_dict(run), **words}))
    assert json.loads(final["data"])["status"] == "completed"


@pytest.mark.django_db
@pytest.mark.parametrize(
    "script, tools, event, status",
    [
        (
            [{"tool_calls": [{"name": "write_note", "arguments": {"title": "t", "body": "b"}}]}],
            ["write_note"],
            "awaiting_approval",
            "waiting_for_approval",
        ),
        (
            [{"tool_calls": [{"name": "calculator", "arguments": {"expression": "1+1"}}]}],  # then the script runs out
            ["calculator"],
            "failed",
            "failed",
        ),
    ],
)
def test_final_event_names_the_state_the_run_rests_in(runtime, alice, fast_stream, script, tools, event, status):
    run = quick_run(runtime, alice, script, tools)
    frames = read_all(session(alice).get(stream_url(run.pk)))
    assert frames[-1]["event"] == event
    payload = json.loads(frames[-1]["data"])
    assert payload["status"] == status
    if event == "awaiting_approval":
        assert [c["name"] for c in payload["pending_approval"]] == ["write_note"]


@pytest.mark.django_db
def test_a_cancelled_queued_run_streams_its_cancelled_step_and_a_cancelled_final_event(runtime, alice, fast_stream):
    run = store.create_queued({"prompt": "never runs", "provider": "scripted", "owner": alice}, {"prompt": "x"})
    runtime.cancel(run.pk, by=alice, source=CancelSource.PLAYGROUND, reason="changed my mind")
    frames = [f for f in read_all(session(alice).get(stream_url(run.pk))) if "event" in f]
    assert [f["event"] for f in frames] == ["step", "cancelled"]
    assert json.loads(frames[0]["data"])["kind"] == "cancelled"
    payload = json.loads(frames[1]["data"])
    assert payload["status"] == "cancelled"
    assert payload["cancel"]["by"] == "alice" and payload["cancel"]["source"] == "playground"


# --- resume --------------------------------------------------------------------------------
@pytest.mark.django_db
def test_last_event_id_resumes_after_that_step(runtime, alice, fast_stream):
    run = quick_run(runtime, alice)
    total = len(runtime.events(run.pk))
    client = session(alice)
    for k in (-1, 0, 2, total - 1):
        by_header = steps_in(read_all(client.get(stream_url(run.pk), headers={"Last-Event-ID": str(k)})))
        by_query = steps_in(read_all(client.get(stream_url(run.pk, f"?after={k}"))))
        assert [int(f["id"]) for f in by_header] == list(range(k + 1, total))
        assert [int(f["id"]) for f in by_query] == list(range(k + 1, total))
    # the browser reconnects to the URL it opened with (?after=) plus the header: the header wins
    both = steps_in(read_all(client.get(stream_url(run.pk, "?after=0"), headers={"Last-Event-ID": "3"})))
    assert [int(f["id"]) for f in both] == list(range(4, total))


@pytest.mark.django_db
@pytest.mark.parametrize("bad", ["abc", "-5", "1.5"])
def test_a_malformed_resume_point_is_refused_clearly(runtime, alice, fast_stream, bad):
    run = quick_run(runtime, alice)
    response = session(alice).get(stream_url(run.pk), headers={"Last-Event-ID": bad})
    assert response.status_code == 400
    assert "integer" in response.json()["detail"]


# A thread executes the run while this thread reads the stream: both need committed data.
@pytest.mark.django_db(transaction=True)
def test_live_stream_resumed_mid_run_misses_and_repeats_nothing_and_ends_cancelled(runtime, alice, fast_stream):
    run_id = runtime.enqueue(
        {"prompt": "slow", "script": SLOW_SCRIPT, "tools": ["sleep"], "max_iterations": 50}, owner=alice
    )
    client = session(alice)
    try:
        first = client.get(stream_url(run_id))
        seen: list[int] = []
        for frame in frames_of(lines_of(first.streaming_content)):
            if frame.get("event") == "step":
                seen.append(int(frame["id"]))
            if len(seen) == 3:
                break
        assert AgentRun.objects.get(pk=run_id).status == RunStatus.RUNNING  # steps came before the end
        first.close()  # the client went away mid-run

        second = client.get(stream_url(run_id), headers={"Last-Event-ID": str(seen[-1])})
        for frame in frames_of(lines_of(second.streaming_content)):
            if frame.get("event") == "step":
                seen.append(int(frame["id"]))
                if len(seen) == 6:
                    runtime.cancel(run_id, by=alice, source=CancelSource.PLAYGROUND)
            elif frame.get("event") in FINAL:
                final = frame
                break
    finally:
        runtime.cancel(run_id, source=CancelSource.SYSTEM)  # no-op when already cancelled
        assert waits.wait_local_idle(30)
    stored = [e.sequence for e in runtime.events(run_id)]
    assert seen == stored == list(range(len(stored)))
    assert final["event"] == "cancelled"
    assert json.loads(final["data"])["status"] == "cancelled"
    assert runtime.events(run_id)[-1].kind == "cancelled"


# --- heartbeat -----------------------------------------------------------------------------
@pytest.mark.django_db
@pytest.mark.parametrize("heartbeat, expected", [(0.05, True), (30, False)])
def test_an_idle_stream_sends_keepalive_comments_and_closes_at_its_time_limit(
    runtime, alice, settings, heartbeat, expected
):
    # A queued run nobody executes: the stream stays idle until its time limit.
    settings.NRLLM_AGENTS = {
        "STREAM_POLL_SECONDS": 0.02,
        "STREAM_HEARTBEAT_SECONDS": heartbeat,
        "STREAM_MAX_SECONDS": 0.4,
    }
    run = store.create_queued({"prompt": "idle", "provider": "scripted", "owner": alice}, {"prompt": "idle"})
    frames = read_all(session(alice).get(stream_url(run.pk)))
    comments = [c for f in frames for c in f["comments"]]
    assert ("keepalive" in comments) is expected
    assert not any(f.get("event") for f in frames)  # no final event: the client reconnects


# --- authentication and visibility ----------------------------------------------------------
@pytest.mark.django_db
def test_token_and_session_auth_see_own_runs_and_404_for_others(runtime, alice, bob, fast_stream, django_user_model):
    from rest_framework.authtoken.models import Token

    run = quick_run(runtime, alice)
    alice_token, bob_token = Token.objects.create(user=alice), Token.objects.create(user=bob)
    anonymous = Client()

    assert anonymous.get(stream_url(run.pk)).status_code == 401
    refused = anonymous.get(stream_url(run.pk), headers={"Authorization": "Token not-a-real-key"})
    assert refused.status_code == 401 and refused["WWW-Authenticate"] == "Token"

    by_token = anonymous.get(stream_url(run.pk), headers={"Authorization": f"Token {alice_token.key}"})
    assert by_token.status_code == 200 and read_all(by_token)[-1]["event"] == "done"
    assert session(alice).get(stream_url(run.pk)).status_code == 200

    assert anonymous.get(stream_url(run.pk), headers={"Authorization": f"Token {bob_token.key}"}).status_code == 404
    assert session(bob).get(stream_url(run.pk)).status_code == 404
    assert session(alice).get(stream_url(uuid.uuid4())).status_code == 404

    staff = django_user_model.objects.create_user("carol", password="x", is_staff=True)
    assert session(staff).get(stream_url(run.pk)).status_code == 200


# --- ASGI ----------------------------------------------------------------------------------
# transaction=True: under ASGI the stream reads in a worker thread of the loop's pool, on a
# connection of its own, which sees only committed rows (as in production).
@pytest.mark.django_db(transaction=True)
def test_under_asgi_the_stream_is_an_async_iterator_with_the_same_frames(runtime, alice, fast_stream):
    run = quick_run(runtime, alice)
    sync_frames = read_all(session(alice).get(stream_url(run.pk)))

    async def read_async() -> tuple[bool, list[str]]:
        client = AsyncClient()
        await client.aforce_login(alice)
        response = await client.get(stream_url(run.pk))
        chunks = [chunk async for chunk in response.streaming_content]
        return response.is_async, chunks

    is_async, chunks = async_to_sync(read_async)()
    assert is_async
    assert list(frames_of(lines_of(chunks))) == sync_frames


# --- real servers --------------------------------------------------------------------------
def _open_stream(base: str, path: str, headers: dict[str, str]) -> http.client.HTTPResponse:
    url = urlsplit(base)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=30)
    conn.request("GET", path, headers={"Accept": "text/event-stream", **headers})
    response = conn.getresponse()
    assert response.status == 200, response.read()[:500]
    return response


def _session_cookie(user) -> str:
    client = Client()
    client.force_login(user)
    return f"sessionid={client.cookies['sessionid'].value}"


# The server is another process and a thread here executes the run: data must be committed.
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("server", ["uvicorn", "gunicorn"])
def test_a_real_server_streams_steps_as_they_happen_and_ends_with_cancelled(
    server, runtime, alice, child_env, fast_stream, tmp_path
):
    from rest_framework.authtoken.models import Token

    env = {**child_env, "NRLLM_STREAM_POLL_SECONDS": "0.05", "NRLLM_STREAM_HEARTBEAT_SECONDS": "1"}
    # uvicorn reads with a token, gunicorn with the session cookie: both auth paths over HTTP
    auth = (
        {"Authorization": f"Token {Token.objects.create(user=alice).key}"}
        if server == "uvicorn"
        else {"Cookie": _session_cookie(alice)}
    )
    with serve(server, env, tmp_path) as base:
        run_id = runtime.enqueue(
            {"prompt": "slow", "script": SLOW_SCRIPT, "tools": ["sleep"], "max_iterations": 50}, owner=alice
        )
        try:
            response = _open_stream(base, stream_url(run_id), auth)
            assert response.getheader("Content-Type").startswith("text/event-stream")
            assert response.getheader("X-Accel-Buffering") == "no"
            ids: list[int] = []
            final = None
            for frame in frames_of(iter(lambda: response.readline().decode(), "")):
                if frame.get("event") == "step":
                    ids.append(int(frame["id"]))
                    if len(ids) == 3:
                        # A buffered response would deliver nothing until the run had ended.
                        assert AgentRun.objects.get(pk=run_id).status == RunStatus.RUNNING
                        runtime.cancel(run_id, by=alice, source=CancelSource.PLAYGROUND)
                elif frame.get("event") in FINAL:
                    final = frame
            # the loop ends because the server closed the stream after the final event
        finally:
            runtime.cancel(run_id, source=CancelSource.SYSTEM)
            assert waits.wait_local_idle(30)
    assert final is not None and final["event"] == "cancelled"
    payload = json.loads(final["data"])
    assert payload["status"] == "cancelled" and payload["cancel"]["by"] == "alice"
    stored = runtime.events(run_id)
    assert ids == [e.sequence for e in stored]
    assert stored[-1].kind == "cancelled"
