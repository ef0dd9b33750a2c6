"""Races of threads' messages: real threads posting at the same moment, each on its own
connection, against PostgreSQL (the thread's row lock), many rounds each; the runs are
executed by the in-process executor.

``transaction=True``: the posters and the executor's threads use their own connections and
must see each other's committed rows.
"""

from __future__ import annotations

import random
import uuid
from typing import Any

import pytest

from nrllm_agents.domain.thread import transcript_after
from nrllm_agents.models import ACTIVE, AgentRun, AgentRunEvent
from nrllm_agents.presentation.presenters import event_dict
from nrllm_agents.runtime import threads
from nrllm_agents.runtime.agent_runtime import AgentRuntime
from tests import waits
from tests.conftest import race_rounds
from tests.e2e.processes import wait_for
from tests.integration.api.test_threads import assert_nothing_started_after_the_boundary, client_of, journal
from tests.integration.runtime.test_races import race
from tests.integration.runtime.test_threads_transcript import turn_of

ROUNDS = race_rounds(60)  # each round races 4-6 threads; NRLLM_RACE_ROUNDS=200 before a release
THREAD_ROUNDS = 20  # the rounds one thread takes in the mixed-strategy race
POSTERS = 8
SLEEPY = [{"tool_calls": [{"name": "sleep", "arguments": {"seconds": 30}}]}, {"content": "never"}]

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres_only]


@pytest.fixture(autouse=True)
def embedded(settings, tmp_path, monkeypatch):
    settings.REDIS_URL = None
    monkeypatch.setenv("NRLLM_CALL_JOURNAL", str(tmp_path / "journal.jsonl"))
    yield
    waits.stop_local_maintenance()
    assert waits.wait_local_idle(60), "the in-process executor is still busy"


def message(prompt: str, script: list[dict[str, Any]]) -> dict[str, Any]:
    tools = ["sleep"] if any("tool_calls" in t for t in script) else []
    return {"prompt": prompt, "script": script, "tools": tools}


def stream(run_id: Any) -> list[AgentRunEvent]:
    return list(AgentRunEvent.objects.filter(run_id=run_id).order_by("sequence"))


def test_concurrent_enqueue_posts_run_one_at_a_time_in_arrival_order():
    runtime = AgentRuntime()
    for round_ in range(ROUNDS):
        thread = threads.create(title=f"enqueue {round_}")
        posted = race(
            *(
                (lambda i=i: runtime.post(thread.pk, message(f"m{i}", [{"content": f"a{i}"}]), strategy="enqueue"))
                for i in range(POSTERS)
            )
        )
        assert all(not isinstance(p, BaseException) for p in posted), posted
        wait_for(
            lambda: not AgentRun.objects.filter(thread=thread, stopped_at__isnull=True).exists(),
            timeout=60,
            what="every message's run to stop",
        )
        runs = list(AgentRun.objects.filter(thread=thread).order_by("thread_position"))
        assert sorted(r.pk for r in runs) == sorted(posted)
        assert [r.thread_position for r in runs] == list(range(POSTERS))
        assert [r.status for r in runs] == ["completed"] * POSTERS, [(r.status, r.error_message) for r in runs]
        for before, after in zip(runs, runs[1:]):
            assert after.started_at >= before.stopped_at, "two runs of a thread executed at once"
            opened = stream(after.pk)[0]
            assert opened.kind == "thread" and opened.payload["after_run"] == str(before.pk)
        # The last run saw every message before it, each answered, in arrival order.
        seen = [m["content"] for m in stream(runs[-1].pk)[0].payload["messages"]]
        assert seen == [x for r in runs[:-1] for x in (r.prompt, r.final_text)] + [runs[-1].prompt]


def test_concurrent_interrupt_posts_leave_exactly_one_run_going(tmp_path):
    runtime = AgentRuntime()
    for round_ in range(ROUNDS):
        thread = threads.create(title=f"interrupt {round_}")
        first = runtime.post(thread.pk, message("first", SLEEPY))
        wait_for(
            lambda: AgentRun.objects.filter(pk=first, status="running", events__kind="llm").exists(),
            what="the first run in its sleep",
        )
        posted = race(
            *(
                (lambda i=i: runtime.post(thread.pk, message(f"m{i}", SLEEPY), strategy="interrupt"))
                for i in range(POSTERS)
            )
        )
        assert all(not isinstance(p, BaseException) for p in posted), posted
        runs = list(AgentRun.objects.filter(thread=thread).order_by("thread_position"))
        going = [r for r in runs if r.status in ACTIVE]
        assert len(going) == 1 and going[0].thread_position == POSTERS  # the last message's run
        # Every other run was cancelled by the message after it, and stops with its audit.
        wait_for(
            lambda: (
                AgentRun.objects.filter(thread=thread, status="cancelled", stopped_at__isnull=False).count() == POSTERS
            ),
            what="every interrupted run to acknowledge",
        )
        entries = journal(tmp_path / "journal.jsonl")
        by_id = {str(r.pk): r for r in runs}
        for run in AgentRun.objects.filter(thread=thread, status="cancelled"):
            assert run.termination_reason == "interrupted_by_message" and run.cancel_source == "system"
            interrupter = by_id[run.cancel_reason.split()[3]]
            assert interrupter.thread_position == run.thread_position + 1
            assert_nothing_started_after_the_boundary(run, entries)
        runtime.cancel(going[0].pk, source="system", reason="round over")
        wait_for(lambda: AgentRun.objects.get(pk=going[0].pk).stopped_at, what="the last run to stop")


def test_an_interrupt_racing_completion_gives_one_outcome_and_a_transcript_that_matches():
    runtime = AgentRuntime()
    outcomes = {"completed": 0, "cancelled": 0}
    for round_ in range(ROUNDS):
        thread = threads.create(title=f"photo finish {round_}")
        first = runtime.post(thread.pk, message("quick", [{"content": "finished", "delay": random.uniform(0, 0.02)}]))
        wait_for(
            lambda: AgentRun.objects.filter(pk=first).exclude(status="queued").exists(), what="the first run's claim"
        )
        second = runtime.post(thread.pk, message("next", [{"content": "second"}]), strategy="interrupt")
        wait_for(lambda: AgentRun.objects.get(pk=second).stopped_at, what="the second run to stop")
        one = AgentRun.objects.get(pk=first)
        assert one.status in ("completed", "cancelled")
        outcomes[one.status] += 1
        events = stream(first)
        if one.status == "completed":
            assert one.termination_reason == "completed" and one.final_text == "finished"
            assert one.cancel_requested_at is None and not any(e.kind == "cancelled" for e in events)
        else:
            assert one.termination_reason == "interrupted_by_message" and one.final_text == ""
            assert events[-1].kind == "cancelled"
        seen = stream(second)[0].payload["messages"]
        assert seen == [
            *transcript_after([event_dict(e) for e in events], status=one.status),
            {"role": "user", "content": "next"},
        ]
        if one.status == "completed":
            assert seen[-2] == {"role": "assistant", "content": "finished"}
        # A cancelled run settled nothing; an answer recorded before its boundary (whole, or
        # the part a cut-short call kept) stays in the transcript as its interrupted turn.
    print(f"interrupt vs completion over {ROUNDS} rounds: {outcomes}")


def test_no_mix_of_strategies_cancels_and_races_loses_a_turn(django_user_model):
    """One thread, round after round: messages posted at once with ``enqueue``, ``interrupt``,
    ``rollback`` and ``reject`` while cancels hit its queued runs. After each round every run
    that started began from exactly the turns before it, and the transcript the next run sees
    (``GET /api/threads/{id}/`` shows it) is the one rebuilt from the runs' own steps."""
    runtime = AgentRuntime()
    owner = django_user_model.objects.create_user(username="talker")
    thread = threads.create(title="every turn", owner=owner)
    threads_used = [thread]
    api = client_of(owner)
    turns: dict[uuid.UUID, list[dict[str, Any]]] = {}  # a stopped run's turn never changes
    checked: set[uuid.UUID] = set()

    def say(i: int, strategy: str) -> Any:
        script = [{"content": f"answer {i} " * 6, "delay": random.choice([0, 0.01, 0.03, 0.06])}]
        try:
            return runtime.post(thread.pk, message(f"message {i}", script), strategy=strategy)
        except threads.ThreadBusy:
            return None

    def cancel_queued() -> int:
        queued = AgentRun.objects.filter(thread=thread, status="queued").values_list("pk", flat=True)
        return sum(runtime.cancel(pk, source="system", reason="race").outcome == "cancelled" for pk in queued)

    def expected_before(position: int) -> list[dict[str, Any]]:
        return [m for pk, p in order if p < position for m in turns[pk]]

    strategies = ["enqueue", "interrupt", "rollback", "reject"]
    counter = 0
    for round_ in range(ROUNDS):
        if round_ and round_ % THREAD_ROUNDS == 0:
            # A fresh thread now and then: every check below rereads the whole thread, and one
            # thread of 400 runs would make the rounds ever slower without racing anything new.
            thread = threads.create(title="every turn", owner=owner)
            threads_used.append(thread)
        actions: list[Any] = []
        for _ in range(4):
            counter += 1
            actions.append(lambda i=counter, s=random.choice(strategies): say(i, s))
        actions += [cancel_queued, cancel_queued]
        random.shuffle(actions)
        results = race(*actions)
        assert not [r for r in results if isinstance(r, BaseException)], results
        wait_for(
            lambda: not AgentRun.objects.filter(thread=thread, stopped_at__isnull=True).exists(),
            timeout=60,
            what=f"round {round_}: every run to stop",
        )
        runs = list(AgentRun.objects.filter(thread=thread).order_by("thread_position"))
        order = [(r.pk, r.thread_position) for r in runs]
        for run in runs:
            turns.setdefault(run.pk, turn_of(run))
        for run in runs:
            if run.pk in checked:
                continue
            checked.add(run.pk)
            first = AgentRunEvent.objects.filter(run=run, sequence=0).first()
            if first is None or first.kind != "thread":
                continue  # never started: cancelled while queued
            assert first.payload["messages"] == [
                *expected_before(run.thread_position),
                {"role": "user", "content": run.prompt},
            ], f"round {round_}: run {run.pk} at {run.thread_position} started from a wrong transcript"
        messages, _ = threads.transcript(thread.pk)
        assert messages == expected_before(len(runs) + 10**6), f"round {round_}: the next run's transcript"
        assert api.get(f"/api/threads/{thread.pk}/").json()["messages"] == messages
    every = AgentRun.objects.filter(thread__in=threads_used)
    kinds_seen = {r.status for r in every}
    print(f"{ROUNDS} rounds on {len(threads_used)} threads: {every.count()} runs, statuses {sorted(kinds_seen)}")
