"""A thread never loses a turn (issue 32, item 1), on PostgreSQL and SQLite: a run that never
took a turn (cancelled while queued, stopped before its first model call) carries the
transcript before it through, whole; an interrupted turn stays; ``GET /api/threads/{id}/``
shows the transcript the next run starts from.

``transaction=True``: the in-process executor's threads use their own connections and see
only committed rows.
"""

from __future__ import annotations

from typing import Any

import pytest

from nrllm_agents.executors import dispatch
from nrllm_agents.models import ACTIVE, AgentRun, AgentRunEvent
from nrllm_agents.runtime import threads
from tests.e2e.processes import wait_for
from tests.integration.api.test_threads import (  # noqa: F401 (fixtures: api; autouse: the in-process executor)
    SLEEPY,
    answer,
    api,
    embedded,
    kinds,
    new_thread,
    opening,
    post,
    run_of,
    sleeping,
    stopped,
)
from tests.integration.runtime.test_races import race

pytestmark = pytest.mark.django_db(transaction=True)


def turn_of(run: AgentRun) -> list[dict[str, Any]]:
    """The turn a stopped run leaves, rebuilt from its own row and steps without the product's
    code, for a model that answers in text only: nothing when it is rolled back or never started
    (no ``thread`` step); else its prompt and its answer (whole, what an interrupted call kept,
    or none when it was stopped before its first model call)."""
    started = AgentRunEvent.objects.filter(run=run, kind="thread").exists()
    if run.rolled_back or not started:
        return []
    calls = [e.payload for e in AgentRunEvent.objects.filter(run=run, kind="llm").order_by("sequence")]
    answer = calls[-1].get("content") if calls else None
    return [{"role": "user", "content": run.prompt}, *([{"role": "assistant", "content": answer}] if answer else [])]


def rebuilt(thread_id: Any, *, before: int | None = None) -> list[dict[str, Any]]:
    """The transcript a run at position ``before`` (default: the next) should start from: the
    turns of the runs before it, in order (``turn_of``)."""
    runs = AgentRun.objects.filter(thread_id=thread_id).order_by("thread_position")
    if before is not None:
        runs = runs.filter(thread_position__lt=before)
    return [m for run in runs for m in turn_of(run)]


def test_a_run_cancelled_while_queued_leaves_the_history_whole(api):
    thread = new_thread(api)
    first = post(api, thread, "one", answer("1"))
    wait_for(lambda: stopped(first, "completed"), what="the first turn")
    second = post(api, thread, "two", [{"content": "2", "delay": 1.0}])
    wait_for(lambda: run_of(second).status == "running", what="the second run to start")
    queued = post(api, thread, "three", answer("3"), multitask_strategy="enqueue")
    assert run_of(queued).status == "queued"
    assert api.post(f"/api/runs/{queued}/cancel/", {"reason": "changed my mind"}, format="json").status_code == 200
    assert kinds(queued) == ["cancelled"]
    wait_for(lambda: stopped(second, "completed"), what="the second turn")
    after = post(api, thread, "four", answer("4"))
    wait_for(lambda: stopped(after, "completed"), what="the next message's run")
    history = [
        {"role": "user", "content": "one"},
        {"role": "assistant", "content": "1"},
        {"role": "user", "content": "two"},
        {"role": "assistant", "content": "2"},
    ]
    assert opening(after)["messages"] == [*history, {"role": "user", "content": "four"}]
    assert opening(after)["after_run"] == second
    detail = api.get(f"/api/threads/{thread}/").json()
    assert detail["messages"] == [*history, {"role": "user", "content": "four"}, {"role": "assistant", "content": "4"}]
    assert detail["messages_from"] == after


def test_an_interrupt_behind_an_enqueued_message_keeps_the_running_turn(api):
    """A completed, B running, C posted with ``enqueue``, D with ``interrupt``: D starts from A's
    turn and B's partial one (C never ran: it leaves none)."""
    thread = new_thread(api)
    a = post(api, thread, "A", answer("a"))
    wait_for(lambda: stopped(a, "completed"), what="A")
    b = post(api, thread, "B", SLEEPY)
    wait_for(lambda: sleeping(b), what="B in its sleep")
    c = post(api, thread, "C", answer("c"), multitask_strategy="enqueue")
    d = post(api, thread, "D", answer("d"), multitask_strategy="interrupt")
    wait_for(lambda: stopped(d, "completed"), what="D")
    assert run_of(b).status == run_of(c).status == "cancelled"
    assert kinds(c) == ["cancelled"]
    seen = opening(d)
    assert seen["after_run"] == b
    assert [(m["role"], m.get("content")) for m in seen["messages"] if m["role"] != "tool"] == [
        ("user", "A"),
        ("assistant", "a"),
        ("user", "B"),
        ("assistant", None),  # B's call of the sleep tool
        ("user", "D"),
    ]
    assert [m["role"] for m in seen["messages"]].count("tool") == 1  # the interrupted sleep, answered
    detail = api.get(f"/api/threads/{thread}/").json()
    assert detail["messages"] == [*seen["messages"], {"role": "assistant", "content": "d"}]


def test_a_run_stopped_before_its_first_model_call_keeps_its_message(api, runtime, monkeypatch):
    """Cancelled while its ``thread`` step is being recorded: the stream holds that step and the
    cancel, no model call; the transcript before it goes on, whole, and the user's message stays
    (a turn with no answer), as a stop before any output keeps it in a chat."""
    thread = new_thread(api)
    a = post(api, thread, "A", answer("a"))
    wait_for(lambda: stopped(a, "completed"), what="A")
    with monkeypatch.context() as held:  # nobody dispatches C: this test executes it itself
        held.setattr(dispatch, "dispatch", lambda run_id, **kw: None)
        late = post(api, thread, "C", answer("c"))

    def cancel_at_the_opening(step: dict[str, Any]) -> None:
        if step["kind"] == "thread":
            runtime.cancel(late, source="system", reason="before its first call")

    runtime.run_queued(late, on_step=cancel_at_the_opening)
    assert kinds(late) == ["thread", "cancelled"] and run_of(late).status == "cancelled"
    after = post(api, thread, "D", answer("d"))
    wait_for(lambda: stopped(after, "completed"), what="D")
    history = [
        {"role": "user", "content": "A"},
        {"role": "assistant", "content": "a"},
        {"role": "user", "content": "C"},
    ]
    assert opening(after)["messages"] == [*history, {"role": "user", "content": "D"}]
    assert opening(after)["after_run"] == late
    messages, _ = threads.transcript(threads.parse_thread_id(thread), before=run_of(after).thread_position)
    assert messages == history


POSTERS = 30


def interrupting(i: int) -> dict[str, Any]:
    return {"prompt": f"m{i}", "script": [{"content": f"a{i} " * 10, "delay": 0.2}], "tools": []}


def test_thirty_concurrent_interrupts_keep_every_turn(api, runtime):
    """30 messages posted at once with ``interrupt`` while a run streams its answer: the
    surviving run starts from every turn taken before it (rebuilt from the runs' own steps)."""
    thread = new_thread(api)
    first = post(api, thread, "hello", answer("hi"))
    wait_for(lambda: stopped(first, "completed"), what="the first turn")
    streaming = post(api, thread, "tell me a story", [{"content": "once upon a time " * 20, "delay": 30}])
    wait_for(lambda: run_of(streaming).status == "running" and "request" in kinds(streaming), what="the story")
    pk = threads.parse_thread_id(thread)
    posted = race(*((lambda i=i: runtime.post(pk, interrupting(i), strategy="interrupt")) for i in range(POSTERS)))
    assert not [p for p in posted if isinstance(p, BaseException)], posted
    survivor = AgentRun.objects.filter(thread_id=pk).order_by("-thread_position").first()
    assert survivor is not None and survivor.thread_position == POSTERS + 1
    wait_for(lambda: stopped(str(survivor.pk)), timeout=60, what="the surviving run to stop")
    assert not AgentRun.objects.filter(thread_id=pk, status__in=list(ACTIVE)).exists()
    seen = opening(str(survivor.pk))["messages"]
    assert seen[:3] == [
        {"role": "user", "content": "hello"},
        {"role": "assistant", "content": "hi"},
        {"role": "user", "content": "tell me a story"},
    ]
    assert seen == [*rebuilt(pk, before=survivor.thread_position), {"role": "user", "content": survivor.prompt}]
    assert api.get(f"/api/threads/{thread}/").json()["messages"] == rebuilt(pk)
