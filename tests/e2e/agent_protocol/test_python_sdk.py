"""Acceptance (issue 38): the unmodified ``langgraph-sdk`` drives our runs through ``/lg/``.

A real server process (gunicorn with a real rqworker on PostgreSQL; runserver with the
in-process executor on SQLite) and the SDK's own clients: assistants, threads, streaming in
pieces, multitask strategies, an approval resumed through ``Command``, the cancel that stops
the call in flight (``wait=True`` returns only once the ``cancelled`` step exists), rollback.
"""

from __future__ import annotations

import time

import pytest
from langgraph_sdk.errors import ConflictError, NotFoundError, UnprocessableEntityError
from langgraph_sdk.schema import Command

from nrllm_agents.models import AgentRun, Note
from tests.waits import wait_for

from .helpers import ANSWER, NOTE, PIECE_SECONDS, answer, said, slow, writing

# transaction=True: the server and the worker are other processes. The SQLite tier runs these too
# (issue 38's acceptance): runserver with the in-process executor.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.sqlite]


def contents(messages):
    return [(m["type"], m["content"]) for m in messages]


def test_a_run_streams_its_answer_in_pieces_and_the_thread_keeps_it(sdk):
    assert [a["assistant_id"] for a in sdk.assistants.search()] == ["helper"]
    assert sdk.assistants.get("helper")["graph_id"] == "agent"
    thread = sdk.threads.create(metadata={"topic": "pieces"})
    assert (thread["status"], thread["metadata"]) == ("idle", {"topic": "pieces"})

    created = {}
    parts = list(
        sdk.runs.stream(
            thread["thread_id"],
            "helper",
            input=said("answer me"),
            stream_mode=["messages-tuple", "values", "updates"],
            context={"script": answer()},
            on_run_created=created.update,
        )
    )
    events = [p.event for p in parts]
    assert events[0] == "metadata" and created["thread_id"] == thread["thread_id"]
    pieces = [p.data[0]["content"] for p in parts if p.event == "messages" and p.data[0]["type"] == "AIMessageChunk"]
    assert len(pieces) > 1 and "".join(pieces) == ANSWER
    assert {p.data[0]["id"] for p in parts if p.event == "messages"} == {
        [p for p in parts if p.event == "values"][-1].data["messages"][-1]["id"]
    }
    final = [p.data for p in parts if p.event == "values"][-1]
    assert contents(final["messages"]) == [("human", "answer me"), ("ai", ANSWER)]
    assert any(p.event == "updates" and "agent" in p.data for p in parts)

    run = sdk.runs.get(thread["thread_id"], created["run_id"])
    assert run["status"] == "success" and run["assistant_id"] == "helper"
    state = sdk.threads.get_state(thread["thread_id"])
    assert contents(state["values"]["messages"]) == contents(final["messages"])
    assert state["next"] == [] and state["interrupts"] == []
    assert len(sdk.threads.get_history(thread["thread_id"])) == 1
    assert [t["thread_id"] for t in sdk.threads.search(metadata={"topic": "pieces"})] == [thread["thread_id"]]
    sdk.threads.update(thread["thread_id"], metadata={"more": 1})
    labels = {"graph_id": "agent", "assistant_id": "helper"}  # what ran on it, as LangGraph labels a thread
    assert sdk.threads.get(thread["thread_id"])["metadata"] == {"topic": "pieces", "more": 1, **labels}


def test_wait_join_and_a_threadless_run(sdk):
    values = sdk.runs.wait(None, "helper", input=said("no thread"), context={"script": answer("alone", 0)})
    assert contents(values["messages"])[-1] == ("ai", "alone")
    thread = sdk.threads.create()
    run = sdk.runs.create(thread["thread_id"], "helper", input=said("later"), context={"script": answer("joined", 0.3)})
    assert run["status"] in ("pending", "running")
    assert contents(sdk.runs.join(thread["thread_id"], run["run_id"])["messages"])[-1] == ("ai", "joined")
    parts = list(sdk.runs.join_stream(thread["thread_id"], run["run_id"], stream_mode="values"))
    assert contents(parts[-1].data["messages"])[-1] == ("ai", "joined")
    first = next(p for p in parts if p.event == "values")  # after the run's first step: the question
    assert (first.id, contents(first.data["messages"])) == ("0", [("human", "later")])
    resumed = list(sdk.runs.join_stream(thread["thread_id"], run["run_id"], stream_mode="values", last_event_id="0"))
    values = [p for p in resumed if p.event == "values"]
    assert len(values) == len([p for p in parts if p.event == "values"]) - 1, "Last-Event-ID resumes after that step"
    assert contents(values[-1].data["messages"])[-1] == ("ai", "joined")


def test_reject_raises_the_sdks_conflict_error_and_interrupt_keeps_the_partial_turn(sdk):
    thread = sdk.threads.create()["thread_id"]
    first = sdk.runs.create(thread, "helper", input=said("take long"), context={"script": slow()})
    wait_for(lambda: writing(first["run_id"]), what="the first run's model call to be in flight")
    time.sleep(2.5 * PIECE_SECONDS)  # it writes a few words
    with pytest.raises(ConflictError):
        sdk.runs.create(thread, "helper", input=said("refused"), multitask_strategy="reject")
    assert AgentRun.objects.filter(thread_id=thread).count() == 1, "a rejected run creates nothing"

    second = sdk.runs.create(
        thread, "helper", input=said("now this"), multitask_strategy="interrupt", context={"script": answer("done", 0)}
    )
    assert contents(sdk.runs.join(thread, second["run_id"])["messages"])[-1] == ("ai", "done")
    assert sdk.runs.get(thread, first["run_id"])["status"] == "interrupted"
    turns = contents(sdk.threads.get_state(thread)["values"]["messages"])
    assert [t[0] for t in turns] == ["human", "ai", "human", "ai"]
    partial = turns[1][1]
    assert partial and "word " * 400 != partial and ("word " * 400).startswith(partial), "the partial turn stays"
    assert [r["run_id"] for r in sdk.runs.list(thread)] == [second["run_id"], first["run_id"]]


def test_enqueue_waits_its_turn_and_rollback_removes_the_turn(sdk, site):
    thread = sdk.threads.create()["thread_id"]
    first = sdk.runs.create(thread, "helper", input=said("one"), context={"script": answer("first", 1.0)})
    second = sdk.runs.create(
        thread, "helper", input=said("two"), multitask_strategy="enqueue", context={"script": answer("second", 0)}
    )
    assert contents(sdk.runs.join(thread, second["run_id"])["messages"]) == [
        ("human", "one"),
        ("ai", "first"),
        ("human", "two"),
        ("ai", "second"),
    ]
    third = sdk.runs.create(thread, "helper", input=said("three"), context={"script": slow()})
    wait_for(lambda: writing(third["run_id"]), what="the third run's model call")
    sdk.runs.cancel(thread, third["run_id"], wait=True, action="rollback")
    with pytest.raises(NotFoundError):
        sdk.runs.get(thread, third["run_id"])
    assert [r["run_id"] for r in sdk.runs.list(thread)] == [second["run_id"], first["run_id"]]
    assert contents(sdk.threads.get_state(thread)["values"]["messages"])[-1] == ("ai", "second")
    row = AgentRun.objects.get(pk=third["run_id"])  # the audit keeps it, marked
    assert (row.status, row.rolled_back, row.cancel_source) == ("cancelled", True, "api")
    import httpx

    shown = httpx.get(f"{site.root}/api/runs/{third['run_id']}/", headers={"Authorization": f"Token {site.api_key}"})
    assert shown.status_code == 200 and shown.json()["thread"]["rolled_back"] is True


def test_cancel_wait_returns_once_the_call_in_flight_stopped(sdk):
    thread = sdk.threads.create()["thread_id"]
    run = sdk.runs.create(thread, "helper", input=said("write forever"), context={"script": slow()})
    wait_for(lambda: writing(run["run_id"]), what="the model call to be in flight")
    time.sleep(2.5 * PIECE_SECONDS)
    started = time.monotonic()
    sdk.runs.cancel(thread, run["run_id"], wait=True, action="interrupt")
    took = time.monotonic() - started
    row = AgentRun.objects.get(pk=run["run_id"])
    assert row.stopped_at is not None, "wait=True answered before the run stopped"
    kinds = list(row.events.order_by("sequence").values_list("kind", flat=True))
    assert kinds[-1] == "cancelled"
    interrupted = row.events.get(kind="llm")
    assert interrupted.payload["interrupted"] is True and interrupted.payload["content"]
    assert took < 20, "the 24 s model call was cut short, not waited out"
    assert sdk.runs.get(thread, run["run_id"])["status"] == "interrupted"
    assert sdk.threads.get(thread)["status"] == "idle"


def test_an_approval_is_an_interrupt_resumed_through_command(sdk):
    thread = sdk.threads.create()["thread_id"]
    values = sdk.runs.wait(thread, "helper", input=said("take a note"), context={"script": NOTE})
    (interrupt,) = values["__interrupt__"]
    assert [c["name"] for c in interrupt["value"]["tool_calls"]] == ["write_note"]
    state = sdk.threads.get_state(thread)
    assert state["next"] == ["tools"] and state["interrupts"][0]["id"] == interrupt["id"]
    assert sdk.threads.get(thread)["status"] == "interrupted"
    assert Note.objects.count() == 0

    parts = list(sdk.runs.stream(thread, "helper", command=Command(resume=True), stream_mode="updates"))
    assert [list(p.data) for p in parts if p.event == "updates"] == [["tools"], ["agent"]]
    assert Note.objects.get().title == "plan"
    assert contents(sdk.threads.get_state(thread)["values"]["messages"])[-1] == ("ai", "Noted.")
    with pytest.raises(ConflictError):  # nothing waits any more
        sdk.runs.create(thread, "helper", command=Command(resume=True))


def test_bad_input_is_the_sdks_422(sdk):
    thread = sdk.threads.create()["thread_id"]
    with pytest.raises(UnprocessableEntityError):
        sdk.runs.create(thread, "helper", input={"text": "no messages"})
    with pytest.raises(UnprocessableEntityError):
        sdk.runs.create(thread, "helper", input=said("x"), context={"unknown_field": 1})
    with pytest.raises(NotFoundError):
        sdk.runs.create(thread, "nobody", input=said("x"))
    with pytest.raises(NotFoundError):
        sdk.threads.get("00000000-0000-0000-0000-000000000000")
