"""Push without the global notify lock (issue 22): a boundary transaction never notifies; a run
nobody watches announces nothing; a watched one is announced at a bounded rate, only to the
processes that watch it, and its watchers still see every step.

Each test runs a real zero-delay run (calculator rounds) in a thread of this process and
listens, on a raw connection of its own, to every channel the run could be announced on: its
own channel, the broadcast channels (``nrllm_cancel``, ``nrllm_watch``) and the channel of the
trigger migration 0008 had on every step (``nrllm_step``). PostgreSQL only.
"""

from __future__ import annotations

import random
import threading
import time
from typing import Any

import psycopg
import pytest
from django.db import connection, connections

from nrllm_agents.conf import app_settings
from nrllm_agents.live.listener import raw_connection
from nrllm_agents.live.push import hub, run_channel
from nrllm_agents.live.watch import Watch
from nrllm_agents.models import AgentRun

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres_only]

ROUNDS = 30  # three steps a round (request, llm, tool), then the answer: 92 steps
SCRIPT = [{"tool_calls": [{"name": "calculator", "arguments": {"expression": f"{i}+1"}}]} for i in range(ROUNDS)] + [
    {"content": "done"}
]


class Ear:
    """A raw connection listening to every channel that could carry news of one run."""

    def __init__(self) -> None:
        self.conn = raw_connection("nrllm-test-ear")
        self.conn.execute("LISTEN nrllm_cancel; LISTEN nrllm_watch; LISTEN nrllm_step; LISTEN nrllm_delta")
        self.run_id: str | None = None

    def follow(self, run_id: str) -> None:
        self.run_id = run_id
        self.conn.execute(f"LISTEN {run_channel(run_id)}")

    def heard(self, quiet: float = 0.5) -> list[psycopg.Notify]:
        """Everything received until ``quiet`` seconds pass without a notification."""
        return list(self.conn.notifies(timeout=quiet))

    def close(self) -> None:
        self.conn.close()


def run_in_thread(runtime: Any, ear: Ear, watch_from_step: bool = False) -> tuple[threading.Thread, dict[str, Any]]:
    """``runtime.run`` of the calculator script on a thread; the ear follows the run from its
    first step (before that step's boundary: ``on_step`` runs first)."""
    box: dict[str, Any] = {"steps": 0}
    named = threading.Event()

    def on_step(step: dict[str, Any]) -> None:
        box["steps"] += 1
        if "id" not in box:
            box["id"] = str(step["run_id"])
            ear.follow(box["id"])
            if watch_from_step:
                box["watch"] = Watch(box["id"])
            named.set()

    def body() -> None:
        try:
            box["result"] = runtime.run(
                {"prompt": "count", "tools": ["calculator"], "script": SCRIPT, "max_iterations": ROUNDS + 1},
                on_step=on_step,
            )
        finally:
            connections.close_all()

    thread = threading.Thread(target=body, daemon=True)
    thread.start()
    assert named.wait(10), "the run never recorded its first step"
    return thread, box


def test_a_run_nobody_watches_announces_nothing(runtime):
    ear = Ear()
    try:
        thread, box = run_in_thread(runtime, ear)
        thread.join(30)
        assert not thread.is_alive()
        heard = [n for n in ear.heard() if box["id"] in n.payload or n.channel == run_channel(box["id"])]
        steps = AgentRun.objects.get(pk=box["id"]).events.count()
        assert steps == 3 * ROUNDS + 2
        # Acceptance: at most one notification per 20 steps; in fact none at all.
        assert len(heard) <= steps // 20, [(n.channel, n.payload) for n in heard]
        assert heard == []
        assert AgentRun.objects.get(pk=box["id"]).watchers == 0
    finally:
        ear.close()


def test_a_watched_run_is_announced_at_a_bounded_rate_and_its_watcher_sees_every_step(runtime):
    assert hub.available()
    ear = Ear()
    try:
        started = time.monotonic()
        thread, box = run_in_thread(runtime, ear, watch_from_step=True)
        watch: Watch = box["watch"]
        seen: list[int] = []
        final = None
        deadline = time.monotonic() + 30
        while final is None and time.monotonic() < deadline:
            watch.wait(1.0)
            update = watch.update()
            seen += [s["sequence"] for s in update.steps]
            final = update.final
        elapsed = time.monotonic() - started
        thread.join(10)
        steps = AgentRun.objects.get(pk=box["id"]).events.count()
        assert final is not None and final[0] == "done", final
        assert seen == list(range(steps)), "the watcher missed or repeated a step"
        assert AgentRun.objects.get(pk=box["id"]).watchers == 1  # counted while it watches
        watch.close()
        deadline = time.monotonic() + 5
        while AgentRun.objects.get(pk=box["id"]).watchers and time.monotonic() < deadline:
            time.sleep(0.01)
        assert AgentRun.objects.get(pk=box["id"]).watchers == 0, "the hub did not uncount itself"

        heard = ear.heard()
        on_channel = [n for n in heard if n.channel == run_channel(box["id"])]
        assert not [n for n in heard if n.channel in ("nrllm_step", "nrllm_delta")], "a per-step trigger is back"
        assert [n.payload for n in heard if n.channel == "nrllm_watch"] == [box["id"]]  # announced once
        # One notifying commit of the publisher carries at most one notice of a run; those
        # commits are at least PUSH_INTERVAL_SECONDS apart: the rate bounds them, not the steps.
        interval = app_settings.PUSH_INTERVAL_SECONDS
        assert len(on_channel) <= elapsed / interval + 3, (len(on_channel), elapsed)
        assert any(n.payload == f"{box['id']}:s" for n in on_channel), "the settle was not announced"
    finally:
        ear.close()


def test_a_process_receives_only_the_runs_its_watchers_follow(alice):
    """This process watches one of two runs: news of the other never reaches its hub."""
    from nrllm_agents import store

    watched, other = (
        store.begin({"prompt": p, "provider": "scripted", "owner": alice}, claimed_by="me", lease_expires=None)
        for p in "ab"
    )
    watch = Watch(watched.pk)
    try:
        watch.update()  # its first read waits until the hub listens to the run and is counted in
        assert watch.sub.registered.is_set()
        assert AgentRun.objects.get(pk=watched.pk).watchers == 1
        assert AgentRun.objects.get(pk=other.pk).watchers == 0
        before = hub.counts["notifies"]
        with connection.cursor() as cursor:  # two commits: the other run's news goes first
            cursor.execute("SELECT pg_notify(%s, %s)", [run_channel(other.pk), f"{other.pk}:0"])
            cursor.execute("SELECT pg_notify(%s, %s)", [run_channel(watched.pk), f"{watched.pk}:s"])
        deadline = time.monotonic() + 5
        while hub.counts["notifies"] == before and time.monotonic() < deadline:
            time.sleep(0.01)
        # Delivered in commit order: had the other run's news reached the hub, it would count 2.
        assert hub.counts["notifies"] == before + 1
    finally:
        watch.close()


def test_a_watcher_that_starts_while_the_run_steps_misses_no_step(alice):
    """The boundary reads the watcher count under the row lock the hub's count takes too: each
    step is either announced or already there when the new watcher first reads. A step that
    fell between would never reach it (nothing polls while pushed), and the round times out."""
    from django.utils import timezone

    from nrllm_agents import store
    from nrllm_agents.domain import Step, StepKind
    from tests.conftest import race_rounds

    steps = 12
    for _ in range(race_rounds(20)):
        run = store.begin(
            {"prompt": "race", "provider": "scripted", "owner": alice},
            claimed_by="me",
            lease_expires=store.lease_until(),
        )
        start_at = random.randrange(steps)
        go = threading.Event()

        def write(run_id: Any = run.pk, start_at: int = start_at, go: threading.Event = go) -> None:
            try:
                for seq in range(steps):
                    if seq == start_at:
                        go.set()
                    step = Step(StepKind.TOOL, 0, {"n": seq})
                    assert store.record_step(run_id, "me", seq, step, timezone.now()) is store.Lease.HELD
            finally:
                go.set()
                connections.close_all()

        writer = threading.Thread(target=write, daemon=True)
        writer.start()
        assert go.wait(10)
        watch = Watch(run.pk)
        seen: list[int] = []
        try:
            deadline = time.monotonic() + 10
            while len(seen) < steps and time.monotonic() < deadline:
                watch.wait(0.5)
                seen += [s["sequence"] for s in watch.update().steps]
        finally:
            watch.close()
            writer.join(10)
        assert seen == list(range(steps)), (start_at, seen)
