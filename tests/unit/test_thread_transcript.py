"""The transcript a thread's run leaves for the next one (``domain.thread``), and how the
``thread`` step reads (``describe``). No database."""

from __future__ import annotations

from nrllm_agents.domain import rebuild_state
from nrllm_agents.domain.fork import NOT_EXECUTED
from nrllm_agents.domain.thread import opening_payload, transcript_after
from nrllm_agents.presentation import describe


def step(sequence: int, kind: str, payload: dict, round_: int = 1) -> dict:
    return {"sequence": sequence, "kind": kind, "round": round_, "payload": payload}


OPENED = step(0, "thread", {"messages": [{"role": "user", "content": "hi"}]}, 0)


def test_a_completed_run_leaves_its_answer():
    steps = [OPENED, step(1, "request", {"messages": []}), step(2, "llm", {"content": "hello"})]
    assert transcript_after(steps, status="completed") == [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello"},
    ]


def test_an_interrupted_model_call_keeps_its_partial_answer_as_the_turn():
    steps = [
        OPENED,
        step(1, "request", {}),
        step(2, "llm", {"content": "hel", "interrupted": True}),
        step(3, "cancelled", {}),
    ]
    assert transcript_after(steps, status="cancelled")[-1] == {"role": "assistant", "content": "hel"}
    # An interrupted call that wrote nothing adds no turn.
    empty = [OPENED, step(1, "request", {}), step(2, "llm", {"content": "", "interrupted": True})]
    assert transcript_after(empty, status="cancelled") == [{"role": "user", "content": "hi"}]


def test_every_call_of_a_cut_turn_is_answered():
    calls = [{"id": "a", "name": "sleep", "arguments": {}}, {"id": "b", "name": "sleep", "arguments": {}}]
    steps = [
        OPENED,
        step(1, "llm", {"content": None, "tool_calls": calls}),
        step(2, "tool", {"call_id": "a", "name": "sleep", "result": None, "error": "interrupted", "interrupted": True}),
        step(3, "cancelled", {}),
    ]
    messages = transcript_after(steps, status="cancelled")
    assert [m.get("tool_call_id") for m in messages if m["role"] == "tool"] == ["a", "b"]
    assert messages[-1]["content"] == NOT_EXECUTED.format(why="cancelled")


def test_the_opening_step_holds_the_transcript_then_the_message_and_rebuilds():
    base = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    payload = opening_payload(base, prompt="again", system="be brief", thread_id="t", position=1, after_run="r")
    assert payload["messages"] == [
        {"role": "system", "content": "be brief"},
        *base,
        {"role": "user", "content": "again"},
    ]
    assert payload["copied_messages"] == 2 and payload["after_run"] == "r"
    state = rebuild_state([{"kind": "thread", "round": 0, "payload": payload}])
    assert state.messages == payload["messages"] and state.sent == len(payload["messages"])
    # A thread's system prompt is its first run's.
    again = opening_payload(payload["messages"], prompt="x", system="other", thread_id="t", position=2, after_run="r")
    assert [m["content"] for m in again["messages"] if m["role"] == "system"] == ["be brief"]


def test_the_thread_step_reads_in_words():
    payload = opening_payload([], prompt="hello", system=None, thread_id="T", position=0, after_run=None)
    assert dict(describe.lines("thread", payload))["continues"] == "nothing (the first turn)"
    head = describe.headline({"kind": "thread", "sequence": 0, "round": 0, "payload": payload})
    assert "message #0 of thread T (first turn, 0 messages)" in head
