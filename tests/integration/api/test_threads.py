"""Threads over HTTP with the in-process executor (PostgreSQL and SQLite): each multitask
strategy end to end. ``tests/e2e/workers/test_threads.py`` plays the same scenarios with real
rqworkers.

``transaction=True``: the executor's threads use their own connections and see only
committed rows.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from django.core.cache import cache
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from nrllm_agents.domain.fork import NOT_EXECUTED
from nrllm_agents.models import AgentRun, AgentRunEvent
from tests import waits
from tests.e2e.processes import wait_for
from tests.integration.runs import kinds

SLEEPY = [{"tool_calls": [{"name": "sleep", "arguments": {"seconds": 30}}]}, {"content": "never"}]


def answer(text: str, expect: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    turn: dict[str, Any] = {"content": text}
    if expect is not None:
        turn["expect"] = expect
    return [turn]


def client_of(user: Any) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.get_or_create(user=user)[0].key}")
    return client


def new_thread(api: APIClient) -> str:
    created = api.post("/api/threads/", {}, format="json")
    assert created.status_code == 201, created.json()
    return str(created.json()["thread_id"])


def post(api: APIClient, thread_id: str, prompt: str, script: list[dict[str, Any]], **extra: Any) -> str:
    tools = ["sleep"] if any("tool_calls" in t for t in script) else []
    body = {"prompt": prompt, "script": script, "tools": tools, **extra}
    answered = api.post(f"/api/threads/{thread_id}/messages/", body, format="json")
    assert answered.status_code == 202, answered.json()
    run = answered.json()
    assert run["thread"]["thread_id"] == thread_id
    return str(run["run_id"])


def run_of(run_id: str) -> AgentRun:
    return AgentRun.objects.get(pk=run_id)


def opening(run_id: str) -> dict[str, Any]:
    first = AgentRunEvent.objects.get(run_id=run_id, sequence=0)
    assert first.kind == "thread"
    return first.payload


def stopped(run_id: str, status: str | None = None) -> bool:
    run = run_of(run_id)
    return run.stopped_at is not None and (status is None or run.status == status)


def sleeping(run_id: str) -> bool:
    """The run's model asked for the long sleep: the tool is in flight."""
    return "llm" in kinds(run_id) and run_of(run_id).status == "running"


def journal(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def assert_nothing_started_after_the_boundary(run: AgentRun, entries: list[dict[str, Any]]) -> None:
    """Every model call and tool start the run journaled has its recorded step, and the
    stream ends with the acknowledgement right after its boundary step."""
    events = list(AgentRunEvent.objects.filter(run_id=run.pk).order_by("sequence"))
    mine = [e for e in entries if e.get("run_id") == str(run.pk)]
    assert sum(e["what"] == "model" for e in mine) == sum(e.kind == "llm" for e in events), run.pk
    assert sum(e["what"] == "tool" for e in mine) == sum(e.kind == "tool" for e in events), run.pk
    assert events[-1].kind == "cancelled"
    if len(events) > 1:
        assert events[-1].payload["boundary_sequence"] == events[-2].sequence


# --- the scenarios (shared with the rqworker tests) ------------------------------------------------
def scenario_interrupt(api: APIClient, journal_path: Path, timeout: float = 60) -> None:
    thread = new_thread(api)
    first = post(api, thread, "wait for me", SLEEPY)
    wait_for(lambda: sleeping(first), timeout=timeout, what="the first run in its sleep")
    expect = [
        {"role": "user", "content": "wait for me"},
        {"role": "assistant"},
        {"role": "tool"},
        {"role": "user", "content": "never mind"},
    ]
    second = post(api, thread, "never mind", answer("ok", expect), multitask_strategy="interrupt")
    wait_for(lambda: stopped(second, "completed"), timeout=timeout, what="the second run to complete")
    interrupted = run_of(first)
    assert interrupted.status == "cancelled" and interrupted.termination_reason == "interrupted_by_message"
    assert interrupted.cancel_source == "system" and second in interrupted.cancel_reason
    assert not interrupted.rolled_back
    assert_nothing_started_after_the_boundary(interrupted, journal(journal_path))
    assert kinds(first)[-2:] == ["tool", "cancelled"]  # the step in flight recorded, then the stop
    assert AgentRunEvent.objects.get(run_id=first, kind="tool").payload.get("interrupted") is True
    seen = opening(second)
    assert seen["after_run"] == first and [m["role"] for m in seen["messages"]] == [e["role"] for e in expect]
    assert run_of(second).started_at >= interrupted.stopped_at  # never two at once
    detail = api.get(f"/api/threads/{thread}/").json()
    assert [r["run_id"] for r in detail["runs"]] == [first, second] and detail["busy"] is None
    assert detail["messages"][-1] == {"role": "assistant", "content": "ok"}
    assert detail["messages"][0]["content"] == "wait for me"  # the interrupted turn stays


def scenario_rollback(api: APIClient, journal_path: Path, timeout: float = 60) -> None:
    thread = new_thread(api)
    kept = post(api, thread, "hello", answer("hi"))
    wait_for(lambda: stopped(kept, "completed"), timeout=timeout, what="the first turn")
    first = post(api, thread, "wait for me", SLEEPY)
    wait_for(lambda: sleeping(first), timeout=timeout, what="the run in its sleep")
    expect = [
        {"role": "user", "content": "hello"},
        {"role": "assistant", "content": "hi"},
        {"role": "user", "content": "instead"},
    ]
    second = post(api, thread, "instead", answer("done", expect), multitask_strategy="rollback")
    wait_for(lambda: stopped(second, "completed"), timeout=timeout, what="the second run to complete")
    rolled = run_of(first)
    assert rolled.status == "cancelled" and rolled.rolled_back
    assert rolled.termination_reason == "interrupted_by_message" and rolled.cancel_source == "system"
    assert kinds(first)[0] == "thread" and kinds(first)[-1] == "cancelled"  # its steps stay
    assert_nothing_started_after_the_boundary(rolled, journal(journal_path))
    assert opening(second)["after_run"] == kept
    detail = api.get(f"/api/threads/{thread}/").json()
    assert [r["rolled_back"] for r in detail["runs"]] == [False, True, False]
    assert [m["content"] for m in detail["messages"]] == ["hello", "hi", "instead", "done"]
    assert api.get(f"/api/runs/{first}/").json()["thread"]["rolled_back"] is True


def scenario_reject(api: APIClient, journal_path: Path, timeout: float = 60) -> None:
    thread = new_thread(api)
    busy = post(api, thread, "wait for me", SLEEPY)
    wait_for(lambda: sleeping(busy), timeout=timeout, what="the run in its sleep")
    count = AgentRun.objects.count()
    refused = api.post(
        f"/api/threads/{thread}/messages/",
        {"prompt": "now", "script": answer("x"), "tools": [], "multitask_strategy": "reject"},
        format="json",
    )
    assert refused.status_code == 409, refused.json()
    body = refused.json()
    assert body["run_id"] == busy and busy in body["detail"] and body["status"] == "running"
    assert AgentRun.objects.count() == count  # nothing created
    assert run_of(busy).status == "running"  # nor cancelled
    api.post(f"/api/runs/{busy}/cancel/", {"reason": "test over"}, format="json")
    wait_for(lambda: stopped(busy), timeout=timeout, what="the busy run to stop")


def scenario_enqueue(api: APIClient, journal_path: Path, timeout: float = 60) -> None:
    thread = new_thread(api)
    slow = [{"tool_calls": [{"name": "sleep", "arguments": {"seconds": 0.3}}]}, {"content": "one"}]
    ids = [post(api, thread, "first", slow)]
    ids.append(post(api, thread, "second", answer("two", [{}, {}, {}, {"content": "one"}, {"content": "second"}])))
    ids.append(post(api, thread, "third", answer("three"), multitask_strategy="enqueue"))
    wait_for(lambda: stopped(ids[-1], "completed"), timeout=timeout, what="the last message's run")
    runs = [run_of(i) for i in ids]
    assert [r.status for r in runs] == ["completed"] * 3
    assert [r.thread_position for r in runs] == [0, 1, 2]
    for before, after in zip(runs, runs[1:]):
        assert after.started_at >= before.stopped_at  # one at a time, in order
        assert opening(str(after.pk))["after_run"] == str(before.pk)
    detail = api.get(f"/api/threads/{thread}/").json()
    assert [m["content"] for m in detail["messages"] if m["role"] != "tool"][-2:] == ["third", "three"]


# --- the tests -----------------------------------------------------------------------------------------
pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def embedded(settings, tmp_path, monkeypatch):
    """The in-process executor (no Redis), a call journal, fresh throttle counters, and nothing
    left running."""
    settings.REDIS_URL = None
    monkeypatch.setenv("NRLLM_CALL_JOURNAL", str(tmp_path / "journal.jsonl"))
    cache.clear()
    yield
    waits.stop_local_maintenance()
    assert waits.wait_local_idle(30), "the in-process executor is still busy"


@pytest.fixture
def api(django_user_model) -> APIClient:
    return client_of(django_user_model.objects.create_user(username="alice"))


def test_interrupt_keeps_the_interrupted_turn_and_the_next_run_continues_from_it(api, tmp_path):
    scenario_interrupt(api, tmp_path / "journal.jsonl")


def test_rollback_drops_the_turn_from_the_transcript_but_keeps_the_run_and_its_steps(api, tmp_path):
    scenario_rollback(api, tmp_path / "journal.jsonl")


def test_reject_answers_409_naming_the_busy_run_and_creates_nothing(api, tmp_path):
    scenario_reject(api, tmp_path / "journal.jsonl")


def test_enqueue_runs_the_messages_one_at_a_time_in_order(api, tmp_path):
    scenario_enqueue(api, tmp_path / "journal.jsonl")


def test_a_thread_answers_to_the_policy(django_user_model):
    alice = django_user_model.objects.create_user(username="alice")
    bob = django_user_model.objects.create_user(username="bob")
    staff = django_user_model.objects.create_user(username="op", is_staff=True)
    thread = new_thread(client_of(alice))
    assert client_of(bob).get(f"/api/threads/{thread}/").status_code == 404
    assert client_of(bob).get("/api/threads/").json()["results"] == []
    body = {"prompt": "hi", "script": answer("x"), "tools": []}
    assert client_of(bob).post(f"/api/threads/{thread}/messages/", body, format="json").status_code == 404
    assert client_of(staff).get(f"/api/threads/{thread}/").status_code == 200
    assert client_of(staff).post(f"/api/threads/{thread}/messages/", body, format="json").status_code == 403
    assert client_of(alice).get("/api/threads/not-an-id/").status_code == 404
    assert APIClient().get("/api/threads/").status_code == 401


@pytest.mark.parametrize(
    "body, field",
    [
        ({"prompt": "hi", "multitask_strategy": "shout"}, "multitask_strategy"),
        ({"prompt": ""}, "prompt"),
        ({"prompt": "hi", "mode": "sync"}, "non_field_errors"),
        ({"prompt": "hi", "tools": ["nope"]}, "tools"),
    ],
)
def test_a_bad_message_is_a_400_and_creates_nothing(api, body, field):
    thread = new_thread(api)
    refused = api.post(f"/api/threads/{thread}/messages/", body, format="json")
    assert refused.status_code == 400 and field in refused.json(), refused.json()
    assert AgentRun.objects.count() == 0


def test_the_default_strategy_is_a_setting(api, settings):
    settings.NRLLM_AGENTS = {**settings.NRLLM_AGENTS, "THREAD_MULTITASK_STRATEGY": "reject"}
    thread = new_thread(api)
    busy = post(api, thread, "wait", SLEEPY)
    wait_for(lambda: sleeping(busy), what="the run in its sleep")
    refused = api.post(
        f"/api/threads/{thread}/messages/", {"prompt": "x", "script": answer("x"), "tools": []}, format="json"
    )
    assert refused.status_code == 409
    api.post(f"/api/runs/{busy}/cancel/", {}, format="json")
    wait_for(lambda: stopped(busy), what="the run to stop")


def test_a_repaired_turn_answers_every_call_it_left(api):
    """An interrupt while the model's call asked for two tools, one still in flight: the
    next run's transcript answers both (one interrupted, one never executed)."""
    thread = new_thread(api)
    two = [
        {
            "tool_calls": [
                {"name": "sleep", "arguments": {"seconds": 30}},
                {"name": "sleep", "arguments": {"seconds": 1}},
            ]
        },
        {"content": "never"},
    ]
    first = post(api, thread, "two naps", two)
    wait_for(lambda: sleeping(first), what="the first nap")
    second = post(api, thread, "wake up", answer("up"), multitask_strategy="interrupt")
    wait_for(lambda: stopped(second, "completed"), what="the second run")
    messages = opening(second)["messages"]
    tool_answers = [m for m in messages if m["role"] == "tool"]
    assert len(tool_answers) == 2
    assert tool_answers[1]["content"] == NOT_EXECUTED.format(why="cancelled")


def test_a_bulk_cancel_of_a_waiting_run_lets_the_next_message_go_at_once(api):
    """The waiting run stops inside the bulk cancel (no segment acknowledges it): the bulk
    cancel itself dispatches the thread's next message, not the queued sweep minutes later."""
    thread = new_thread(api)
    note = [{"tool_calls": [{"name": "write_note", "arguments": {"title": "t", "body": "b"}}]}, {"content": "x"}]
    waiting = post(api, thread, "note it", note, tools=["write_note"])
    wait_for(lambda: run_of(waiting).status == "waiting_for_approval", what="the run to wait for approval")
    after = post(api, thread, "then this", answer("done"))
    assert run_of(after).status == "queued"
    cancelled = api.post("/api/runs/cancel/", {"ids": [waiting], "reason": "no"}, format="json")
    assert cancelled.status_code == 200 and cancelled.json()["cancelled_total"] == 1
    wait_for(lambda: stopped(after, "completed"), timeout=10, what="the next message's run")


def test_the_queued_sweep_leaves_a_waiting_message_alone_and_wakes_it_once_its_turn_came(api):
    """A message waiting behind a run of its thread is not stranded. Once that run stops with
    no segment to dispatch the next (a dead worker's run, cancelled, then acknowledged by the
    reaper's store pass), the queued sweep is what wakes it."""
    from datetime import timedelta

    from django.utils import timezone

    from nrllm_agents import store
    from nrllm_agents.executors import recovery
    from nrllm_agents.models import Thread

    thread = new_thread(api)
    dead = store.begin(
        {"prompt": "lost", "provider": "scripted", "thread": Thread.objects.get(pk=thread), "thread_position": 0},
        claimed_by="worker:gone:1",
        lease_expires=timezone.now() - timedelta(seconds=1),
    )
    later = post(api, thread, "then", answer("ok"))
    assert recovery.stale_queued(older_than=0, limit=100) == []  # it waits: not stranded
    store.cancel(dead.pk, source="system", reason="test")
    store.reap()  # acknowledges the cancel of the dead segment; dispatches nothing
    assert run_of(str(dead.pk)).stopped_at and run_of(later).status == "queued"
    assert recovery.stale_queued(older_than=0, limit=100) == [uuid.UUID(later)]
    assert recovery.sweep_queued(older_than=0).recovered == [uuid.UUID(later)]
    wait_for(lambda: stopped(later, "completed"), what="the swept message's run")
