"""Live by push (issue 11): the model's words reach watchers before its step is recorded, idle
watchers cost no query and hold no connection, streams are capped, a lost listener falls back
to polling. On SQLite the streams poll and the deltas of runs executed in this process still
reach them."""

from __future__ import annotations

import gc
import json
import threading
import time
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connection, connections
from django.test import Client

from nrllm_agents import admission, store
from nrllm_agents.live.push import hub
from nrllm_agents.live.watch import Watch, merge_deltas
from nrllm_agents.models import AgentRun, CancelSource
from tests.conftest import is_postgres
from tests.integration.api.test_stream import frames_of, lines_of, stream_url
from tests.waits import wait_for

ANSWER = " ".join(f"word{i}" for i in range(40))
WRITING = [{"delay": 1.5, "content": ANSWER, "usage": {"prompt_tokens": 9, "completion_tokens": 40}}]


@pytest.fixture
def live_settings(settings):
    settings.NRLLM_AGENTS = {"STREAM_POLL_SECONDS": 0.05, "STREAM_HEARTBEAT_SECONDS": 30, "STREAM_MAX_SECONDS": 60}
    settings.REDIS_URL = None
    return settings


def in_thread(target) -> threading.Thread:
    def body() -> None:
        try:
            target()
        finally:
            connections.close_all()

    thread = threading.Thread(target=body, daemon=True)
    thread.start()
    return thread


def stored_kinds(run_id: Any) -> list[str]:
    return list(AgentRun.objects.get(pk=run_id).events.order_by("sequence").values_list("kind", flat=True))


def text_of(deltas: list[dict[str, Any]]) -> str:
    """The pieces joined, checked contiguous; a watcher that joined mid-answer starts later."""
    start = deltas[0]["offset"] if deltas else 0
    text = ""
    for delta in deltas:
        assert delta["offset"] == start + len(text), "a piece is missing or repeated"
        text += delta["text"]
    assert ANSWER[start : start + len(text)] == text
    return text


def wait_listening() -> None:
    if is_postgres():
        wait_for(hub.listening.is_set, timeout=10, interval=0.01)


# --- deltas --------------------------------------------------------------------------------
@pytest.mark.django_db(transaction=True)
def test_the_stream_delivers_the_answer_in_pieces_before_its_step_and_never_stores_them(runtime, alice, live_settings):
    box: dict[str, Any] = {}
    started = threading.Event()

    def run() -> None:
        box["result"] = runtime.run(
            {"prompt": "write", "script": WRITING, "tools": []},
            owner=alice,
            on_step=lambda step: (box.setdefault("id", step["run_id"]), started.set()),
        )

    thread = in_thread(run)
    assert started.wait(10)
    client = Client()
    client.force_login(alice)
    frames = list(frames_of(lines_of(client.get(stream_url(box["id"]), HTTP_LAST_EVENT_ID="0").streaming_content)))
    thread.join(10)

    events = [f.get("event") for f in frames if "event" in f]
    deltas = [json.loads(f["data"]) for f in frames if f.get("event") == "delta"]
    assert len(deltas) >= 2, events  # in pieces, not at the end in one go
    assert all("id" not in f for f in frames if f.get("event") == "delta")
    assert events.index("delta") < events.index("step")  # the words come before their step
    llm_frame = next(f for f in frames if f.get("event") == "step" and json.loads(f["data"])["kind"] == "llm")
    assert all(i < frames.index(llm_frame) for i, f in enumerate(frames) if f.get("event") == "delta")
    assert text_of(deltas)
    assert {d["run_id"] for d in deltas} == {box["id"]}
    assert {d["round"] for d in deltas} == {json.loads(llm_frame["data"])["round"]}
    assert events[-1] == "done"
    assert stored_kinds(box["id"]) == ["request", "llm"]  # nothing of the pieces was recorded
    assert AgentRun.objects.get(pk=box["id"]).events.get(kind="llm").payload["content"] == ANSWER


@pytest.mark.django_db(transaction=True)
def test_agent_events_follow_json_prints_delta_lines_live(runtime, alice, live_settings, capsys):
    box: dict[str, Any] = {}
    started = threading.Event()

    def run() -> None:
        runtime.run(
            {"prompt": "write", "script": WRITING, "tools": []},
            owner=alice,
            on_step=lambda step: (box.setdefault("id", step["run_id"]), started.set()),
        )

    thread = in_thread(run)
    assert started.wait(10)
    call_command("agent_events", box["id"], "--follow", "--json")
    thread.join(10)
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    kinds = [line["event"] if line["event"] != "step" else line["step"]["kind"] for line in lines]
    assert kinds[0] == "started" and kinds[-1] == "done"
    assert kinds.count("delta") >= 2
    assert kinds.index("delta") < kinds.index("llm")
    assert text_of([{k: v for k, v in line.items() if k != "event"} for line in lines if line["event"] == "delta"])


def test_contiguous_pieces_merge_and_a_gap_stays_visible():
    pieces = [
        {"run_id": "r", "round": 1, "text": "ab", "offset": 0},
        {"run_id": "r", "round": 1, "text": "c", "offset": 2},
        {"run_id": "r", "round": 1, "text": "x", "offset": 9},
        {"run_id": "r", "round": 2, "text": "y", "offset": 0},
    ]
    assert [(d["text"], d["offset"], d["round"]) for d in merge_deltas(pieces)] == [
        ("abc", 0, 1),
        ("x", 9, 1),
        ("y", 0, 2),
    ]


# --- push: no query and no connection while idle ----------------------------------------------------
@pytest.mark.postgres_only
@pytest.mark.django_db(transaction=True)
def test_idle_watchers_read_nothing_hold_no_connection_and_wake_on_a_commit(runtime, alice, live_settings):
    run = store.begin(
        {"prompt": "p", "provider": "scripted", "owner": alice}, claimed_by="me", lease_expires=store.lease_until()
    )
    watchers = [Watch(run.pk) for _ in range(50)]
    wait_listening()
    got: dict[int, list[int]] = {i: [] for i in range(len(watchers))}
    stop = threading.Event()

    def follow(i: int, watch: Watch) -> None:
        while not stop.is_set():
            got[i].extend(s["sequence"] for s in watch.update().steps)
            watch.wait(30)

    threads = [in_thread(lambda i=i, w=w: follow(i, w)) for i, w in enumerate(watchers)]
    try:
        wait_for(lambda: all(w.reads >= 1 for w in watchers), timeout=10, interval=0.01)
        reads, refreshes = sum(w.reads for w in watchers), hub.counts["refreshes"]
        time.sleep(1.0)  # idle: nothing may be read meanwhile
        assert sum(w.reads for w in watchers) == reads and hub.counts["refreshes"] == refreshes
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()")
            held = cursor.fetchone()[0]
        # this test's connection, the hub's listening and reading ones, the cancel watcher's, and
        # whatever the process's connection pool keeps open for reuse (bounded by its max_size):
        # a constant, not one per watcher (50 here)
        pool = (connection.settings_dict.get("OPTIONS") or {}).get("pool") or {}
        pooled = pool.get("max_size", 0) if isinstance(pool, dict) else 0
        assert held <= 5 + pooled < len(watchers), held

        from nrllm_agents.domain import Step, StepKind

        assert (
            store.record_step(run.pk, "me", 0, Step(StepKind.REQUEST, 0, {"x": 1}), run.created_at) is store.Lease.HELD
        )
        wait_for(lambda: all(got[i] == [0] for i in got), timeout=5, interval=0.01)
        assert sum(w.reads for w in watchers) == reads  # they took it from the one shared read
        assert hub.counts["refreshes"] == refreshes + 1
    finally:
        stop.set()
        for w in watchers:
            w.sub.changed()
        for t in threads:
            t.join(5)
        for w in watchers:
            w.close()
        runtime.cancel(run.pk, source=CancelSource.SYSTEM)


@pytest.mark.postgres_only
@pytest.mark.django_db(transaction=True)
def test_a_lost_listener_falls_back_to_polling_then_reconnects(runtime, alice, live_settings):
    run = store.begin(
        {"prompt": "p", "provider": "scripted", "owner": alice}, claimed_by="me", lease_expires=store.lease_until()
    )
    watch = Watch(run.pk)
    try:
        wait_listening()
        watch.update()
        connects = hub.counts["connects"]
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_terminate_backend(%s)", [hub.listener_pid])
        wait_for(lambda: not hub.listening.is_set() or hub.counts["connects"] > connects, timeout=10, interval=0.01)
        from nrllm_agents.domain import Step, StepKind

        assert store.record_step(run.pk, "me", 0, Step(StepKind.REQUEST, 0, {}), run.created_at) is store.Lease.HELD
        seen: list[int] = []
        wait_for(
            lambda: seen.extend(s["sequence"] for s in watch.update().steps) or seen == [0], timeout=10, interval=0.01
        )
        wait_for(lambda: hub.listening.is_set() and hub.counts["connects"] > connects, timeout=10, interval=0.01)
        assert store.record_step(run.pk, "me", 1, Step(StepKind.REQUEST, 0, {}), run.created_at) is store.Lease.HELD
        assert watch.wait(5)
        wait_for(
            lambda: seen.extend(s["sequence"] for s in watch.update().steps) or seen == [0, 1],
            timeout=10,
            interval=0.01,
        )
    finally:
        watch.close()
        runtime.cancel(run.pk, source=CancelSource.SYSTEM)


def test_on_sqlite_or_without_push_watchers_poll(settings):
    settings.NRLLM_AGENTS = {"STREAM_PUSH": False}
    assert hub.available() is False
    if not is_postgres():
        settings.NRLLM_AGENTS = {}
        assert hub.available() is False


# --- caps --------------------------------------------------------------------------------------------
@pytest.mark.django_db(transaction=True)
def test_a_watcher_over_the_per_user_cap_gets_429_until_one_closes(runtime, alice, bob, live_settings):
    # Streams of other tests that a test client never closed may still count: start from them.
    # (user ids are reused between tests, so alice may inherit some) Those only garbage
    # collection would close are closed first, so none closes during the test.
    gc.collect()
    total, by_user = admission.in_use(admission.Kind.STREAM)
    cap = by_user.get(alice.pk, 0) + 2
    live_settings.NRLLM_AGENTS = {
        **live_settings.NRLLM_AGENTS,
        "STREAM_MAX_PER_USER": cap,
        "STREAM_MAX_OPEN": total + 3,
    }
    run = store.begin(
        {"prompt": "p", "provider": "scripted", "owner": alice}, claimed_by="me", lease_expires=store.lease_until()
    )
    bobs = store.begin(
        {"prompt": "p", "provider": "scripted", "owner": bob}, claimed_by="me", lease_expires=store.lease_until()
    )
    a, b = Client(), Client()
    a.force_login(alice)
    b.force_login(bob)
    opened = []
    try:
        for _ in range(2):
            response = a.get(stream_url(run.pk))
            assert response.status_code == 200
            next(iter(response.streaming_content))
            opened.append(response)
        refused = a.get(stream_url(run.pk))
        assert refused.status_code == 429
        assert f"this user ({cap} at most)" in refused.json()["detail"] and refused["Retry-After"]
        response = b.get(stream_url(bobs.pk))  # another user: under both caps
        assert response.status_code == 200
        opened.append(response)
        over = b.get(stream_url(bobs.pk))
        assert over.status_code == 429 and f"on this server ({total + 3} at most)" in over.json()["detail"]
        opened.pop(0).close()  # a closed stream gives its place back
        again = a.get(stream_url(run.pk))
        assert again.status_code == 200
        opened.append(again)
    finally:
        for response in opened:
            response.close()
        runtime.cancel(run.pk, source=CancelSource.SYSTEM)
        runtime.cancel(bobs.pk, source=CancelSource.SYSTEM)
    assert admission.in_use(admission.Kind.STREAM) == (total, by_user)
