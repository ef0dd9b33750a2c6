"""AG-UI (issue 49): the event mapping of a run with a tool, a resume after every event id (no
loss, no repeat against the stored steps), the interrupt outcome and its resume, Stop (before
the run exists, and racing its start), and the surfaces' policy and limits.

``transaction=True``: runs execute on threads of the in-process executor, with connections of
their own that only see committed rows; the Stop races use real threads on PostgreSQL.
"""

from __future__ import annotations

import copy
import gc
import json
import threading
import uuid
from typing import Any

import pytest
from django.db import connection
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from nrllm_agents import admission
from nrllm_agents.catalog import agents
from nrllm_agents.models import AgentRun, CancelSource, ClientRun, Note, RunStatus
from nrllm_agents.testing.ag_ui import parse, problems
from tests import waits
from tests.conftest import race_rounds
from tests.integration.executors.test_queue import no_redis  # noqa: F401  (fixture)

pytestmark = pytest.mark.django_db(transaction=True)

CALC = [
    {"tool_calls": [{"name": "calculator", "arguments": {"expression": "2+3"}}]},
    {"content": "It is 5."},
]
NOTE = [
    {"tool_calls": [{"name": "write_note", "arguments": {"title": "plan", "body": "ship it"}}]},
    {"content": "Noted."},
]


def client_of(user: Any) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {Token.objects.get_or_create(user=user)[0].key}")
    return client


def run_input(thread: str, run: str, text: str = "add 2 and 3", **more: Any) -> dict[str, Any]:
    return {"threadId": thread, "runId": run, "messages": [{"id": "m1", "role": "user", "content": text}],
            "tools": [], "context": [], "state": {}, "forwardedProps": {}, **more}  # fmt: skip


def stream(
    client: APIClient, body: dict[str, Any], agent: str = "calc", **headers: str
) -> list[tuple[str | None, dict[str, Any]]]:
    response = client.post(f"/ag-ui/agents/{agent}/", body, format="json", **headers)
    assert response.status_code == 200, getattr(response, "content", b"")
    return parse(b"".join(response.streaming_content).decode())


@pytest.fixture
def alice_client(alice, no_redis):  # noqa: F811
    agents.save("calc", {"provider": "scripted", "tools": ["calculator"], "script": CALC}, description="adds")
    agents.save("notes", {"provider": "scripted", "tools": ["write_note"], "script": NOTE}, description="notes")
    return client_of(alice)


def test_a_run_with_a_tool_streams_as_ag_ui_events(alice_client):
    thread, run = str(uuid.uuid4()), "client-run-1"
    events = stream(alice_client, run_input(thread, run))
    types = [e["type"] for _, e in events]
    assert types[0] == "RUN_STARTED" and events[0][1]["runId"] == run and events[0][1]["threadId"] == thread
    assert events[-1][1] == {"type": "RUN_FINISHED", "threadId": thread, "runId": run, "outcome": {"type": "success"}}
    calls = [e for _, e in events if e["type"].startswith("TOOL_CALL")]
    assert [c["type"] for c in calls] == ["TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_END", "TOOL_CALL_RESULT"]
    assert calls[0]["toolCallName"] == "calculator" and json.loads(calls[1]["delta"]) == {"expression": "2+3"}
    assert json.loads(calls[3]["content"])["value"] == 5 and len({c["toolCallId"] for c in calls}) == 1
    text = "".join(e["delta"] for _, e in events if e["type"] == "TEXT_MESSAGE_CONTENT")
    assert text == "It is 5."
    steps = [e["stepName"] for _, e in events if e["type"] == "STEP_STARTED"]
    assert steps[0] == "model 1" and steps[1].startswith("tool calculator") and steps[2] == "model 2"
    assert types.count("STEP_STARTED") == types.count("STEP_FINISHED")
    ours = AgentRun.objects.get(client_runs__client_run_id=run)
    assert str(ours.thread_id) == thread and ours.status == RunStatus.COMPLETED


def test_a_reconnect_after_any_event_gets_the_rest_and_nothing_twice(alice_client):
    """Against the stored steps: the events of the whole run, cut after each id in turn."""
    thread, run = str(uuid.uuid4()), "client-run-2"
    whole = stream(alice_client, run_input(thread, run))
    ours = AgentRun.objects.get(client_runs__client_run_id=run)
    assert problems(whole, ours) == []
    for cut, (event_id, _) in enumerate(whole):
        if event_id is None:
            continue
        again = stream(alice_client, run_input(thread, run), HTTP_LAST_EVENT_ID=event_id)
        assert again[0][1]["type"] == "RUN_STARTED" and again[-1][1]["type"] == "RUN_FINISHED"
        reopened = [(i, e) for i, e in again[1:] if i is not None or e["type"] == "RUN_FINISHED"]
        assert problems(whole[1 : cut + 1] + reopened, ours) == [], event_id
    # a reattach without a cursor: the snapshots, then the end
    again = stream(alice_client, run_input(thread, run))
    assert [e["type"] for _, e in again] == ["RUN_STARTED", "MESSAGES_SNAPSHOT", "STATE_SNAPSHOT", "RUN_FINISHED"]
    roles = [m["role"] for m in again[1][1]["messages"]]
    assert roles == ["user", "assistant", "tool", "assistant"]
    assert AgentRun.objects.count() == 1, "a reattach starts nothing"


def test_a_cut_inside_the_text_reopens_the_message_and_sends_only_the_rest(alice_client):
    thread, run = str(uuid.uuid4()), "client-run-3"
    stream(alice_client, run_input(thread, run))
    ours = AgentRun.objects.get(client_runs__client_run_id=run)
    sequence = ours.events.get(kind="request", round=2).sequence
    # the client had 3 characters of round 2's text, written before its step was stored
    again = stream(alice_client, run_input(thread, run), HTTP_LAST_EVENT_ID=f"{sequence}.t2.3")
    types = [e["type"] for _, e in again]
    assert types[:3] == ["RUN_STARTED", "STEP_STARTED", "TEXT_MESSAGE_START"]
    assert [e["delta"] for _, e in again if e["type"] == "TEXT_MESSAGE_CONTENT"] == ["is 5."]


def test_an_approval_ends_as_an_interrupt_and_resume_continues_the_run(alice_client):
    thread = str(uuid.uuid4())
    first = stream(alice_client, run_input(thread, "ask-1", "note it"), agent="notes")
    outcome = first[-1][1]["outcome"]
    assert outcome["type"] == "interrupt" and outcome["interrupts"][0]["reason"] == "tool_approval"
    interrupt = outcome["interrupts"][0]
    assert interrupt["toolCallId"] == next(e["toolCallId"] for _, e in first if e["type"] == "TOOL_CALL_START")
    resume = [{"interruptId": interrupt["id"], "status": "resolved", "payload": {"approved": True}}]
    second = stream(alice_client, run_input(thread, "ask-2", "note it", resume=resume), agent="notes")
    types = [e["type"] for _, e in second]
    assert types[0] == "RUN_STARTED" and second[0][1]["runId"] == "ask-2"
    assert "TOOL_CALL_RESULT" in types and second[-1][1]["outcome"] == {"type": "success"}
    assert Note.objects.get().title == "plan"
    assert AgentRun.objects.count() == 1, "the resume is the same run of ours"


def test_a_stop_before_the_run_exists_wins_and_a_disconnect_cancels_nothing(alice_client, alice):
    thread = str(uuid.uuid4())
    answer = alice_client.post("/ag-ui/runs/early/cancel/")
    assert answer.status_code == 202 and answer.json()["status"] == "pending"
    events = stream(alice_client, run_input(thread, "early"))
    assert events[-1][1] == {
        "type": "RUN_FINISHED",
        "threadId": thread,
        "runId": "early",
        "outcome": {"type": "cancelled"},
    }
    run = AgentRun.objects.get(client_runs__client_run_id="early")
    assert (run.status, run.cancel_source, run.cancelled_by) == (RunStatus.CANCELLED, CancelSource.AG_UI, alice)
    assert not run.events.filter(kind="llm").exists(), "nothing of it ran"
    # a stream dropped at once (a disconnect) leaves its run going
    response = alice_client.post("/ag-ui/agents/calc/", run_input(thread, "dropped"), format="json")
    response.close()
    assert waits.wait_local_idle(30)
    assert AgentRun.objects.get(client_runs__client_run_id="dropped").status == RunStatus.COMPLETED


@pytest.mark.postgres_only  # row locks across threads
def test_a_stop_racing_the_start_wins_every_round(alice_client, alice):
    """Issue 49: a Stop pressed as the run starts cancels it, whichever request is first."""
    thread = str(uuid.uuid4())
    rounds = race_rounds(100)
    for n in range(rounds):
        run = f"race-{n}"
        barrier = threading.Barrier(2)
        ends: list[Any] = []

        def start(run: str = run) -> None:
            client = client_of(alice)
            barrier.wait()
            try:
                ends.append(stream(client, run_input(thread, run))[-1][1])
            finally:
                connection.close()

        def stop(run: str = run) -> None:
            client = client_of(alice)
            barrier.wait()
            try:
                assert client.post(f"/ag-ui/runs/{run}/cancel/").status_code in (200, 202)
            finally:
                connection.close()

        workers = [threading.Thread(target=start), threading.Thread(target=stop)]
        for w in workers:
            w.start()
        for w in workers:
            w.join(60)
        ours = AgentRun.objects.get(client_runs__client_run_id=run)
        assert (ours.status, ours.cancel_source) == (RunStatus.CANCELLED, CancelSource.AG_UI), n
        assert ends == [{"type": "RUN_FINISHED", "threadId": thread, "runId": run, "outcome": {"type": "cancelled"}}]
    assert ClientRun.objects.filter(cancel_requested_at__isnull=False).count() == rounds


def test_policy_and_limits(alice_client, alice, bob, settings):
    thread = str(uuid.uuid4())
    anonymous = APIClient().post("/ag-ui/agents/calc/", run_input(thread, "x"), format="json")
    assert anonymous.status_code in (401, 403) and "detail" in anonymous.json()
    assert alice_client.post("/ag-ui/agents/nope/", run_input(thread, "x"), format="json").status_code == 404
    bad = alice_client.post("/ag-ui/agents/calc/", {"threadId": thread}, format="json")
    assert bad.status_code == 400 and "runId" in bad.json()["detail"]
    not_uuid = alice_client.post("/ag-ui/agents/calc/", run_input("thread-1", "x"), format="json")
    assert not_uuid.status_code == 400 and "threadId" in not_uuid.json()["detail"]
    stream(alice_client, run_input(thread, "mine"))
    # bob cannot post to alice's thread, nor stop her run by its client id or by ours
    bob_client = client_of(bob)
    assert bob_client.post("/ag-ui/agents/calc/", run_input(thread, "his"), format="json").status_code == 404
    ours = AgentRun.objects.get(client_runs__client_run_id="mine")
    assert bob_client.post("/ag-ui/runs/mine/cancel/").status_code == 202  # his own pending Stop, not hers
    assert bob_client.post(f"/ag-ui/runs/{ours.pk}/cancel/").status_code == 202
    assert AgentRun.objects.get(pk=ours.pk).status == RunStatus.COMPLETED
    # the session needs its CSRF token, as the REST API's
    browser = APIClient(enforce_csrf_checks=True)
    browser.force_login(alice)
    refused = browser.post("/ag-ui/runs/mine/cancel/")
    assert refused.status_code == 403 and "CSRF" in refused.json()["detail"]
    # the create rate limit, as every surface
    rest = copy.deepcopy(settings.REST_FRAMEWORK)
    rest["DEFAULT_THROTTLE_RATES"]["run_create"] = "1/day"
    settings.REST_FRAMEWORK = rest
    settings.REDIS_URL = None
    stream(alice_client, run_input(str(uuid.uuid4()), "one"))
    refused = alice_client.post("/ag-ui/agents/calc/", run_input(str(uuid.uuid4()), "two"), format="json")
    assert refused.status_code == 429 and "Retry-After" in refused
    # the stream cap, as every stream: a reattach past it is a 429
    gc.collect()
    _, by_user = admission.in_use(admission.Kind.STREAM)
    settings.NRLLM_AGENTS = {
        **getattr(settings, "NRLLM_AGENTS", {}),
        "STREAM_MAX_PER_USER": by_user.get(alice.pk, 0) + 1,
    }
    held = admission.hold(admission.Kind.STREAM, alice.pk)
    assert isinstance(held, admission.Slot)
    try:
        capped = alice_client.post("/ag-ui/agents/calc/", run_input(thread, "mine"), format="json")
        assert capped.status_code == 429 and "detail" in capped.json()
    finally:
        held.release()
