"""The rest of issue 38's protocol, through the unmodified ``langgraph-sdk``: the ``events``
stream mode, ``get_schemas``, ``if_exists`` / ``if_not_exists``, ``runs.delete`` and
``threads.delete``, ``multitask_strategy="rollback"``, a cancel without ``wait``, the REST
API's limits as the SDK's ``RateLimitError``, and a failed run reading ``error``.

Same server and fixtures as ``test_python_sdk``; every exchange is checked against
``/lg/openapi.json`` (``contract``).
"""

from __future__ import annotations

import uuid

import httpx
import pytest
from langgraph_sdk.errors import ConflictError, NotFoundError, RateLimitError

from nrllm_agents.models import AgentRun, Thread
from tests.waits import wait_for

from .helpers import ANSWER, answer, said, slow, writing

# transaction=True: the server and the worker are other processes. Both tiers, as test_python_sdk.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.sqlite]

CALC_THEN_ANSWER = [
    {"tool_calls": [{"name": "calculator", "arguments": {"expression": "6 * 7"}}]},
    {"content": ANSWER, "delay": 0.6},
]


def contents(messages):
    return [(m["type"], m["content"]) for m in messages]


def api(site, path: str) -> httpx.Response:
    """``GET /api/<path>`` as alice: what our own REST API keeps."""
    return httpx.get(f"{site.root}/api/{path}", headers={"Authorization": f"Token {site.api_key}"})


def test_the_events_mode_and_an_assistants_schemas(sdk):
    schemas = sdk.assistants.get_schemas("helper")
    assert schemas["graph_id"] == "agent" and schemas["input_schema"]["required"] == ["messages"]
    with pytest.raises(NotFoundError):
        sdk.assistants.get_schemas("nobody")

    thread = sdk.threads.create()["thread_id"]
    parts = list(
        sdk.runs.stream(
            thread, "helper", input=said("six times seven"), stream_mode="events", context={"script": CALC_THEN_ANSWER}
        )
    )
    assert parts[0].event == "metadata" and {p.event for p in parts[1:]} == {"events"}
    events = [p.data for p in parts[1:]]
    names = [e["event"] for e in events]
    tool_at = names.index("on_tool_end")
    assert names[:tool_at] == ["on_chat_model_stream", "on_chat_model_end"] and names[-1] == "on_chain_end"
    assert events[0]["data"]["chunk"]["tool_calls"][0]["name"] == "calculator"
    assert events[tool_at]["name"] == "tools" and "42" in str(events[tool_at]["data"]["output"]["content"])
    pieces = [e["data"]["chunk"]["content"] for e in events[tool_at:] if e["event"] == "on_chat_model_stream"]
    assert len(pieces) > 1 and "".join(pieces) == ANSWER, "the chunks add up to the answer"
    (end,) = [e["data"]["output"] for e in events[tool_at:] if e["event"] == "on_chat_model_end"]
    assert end["content"] == ANSWER
    assert {p.data["run_id"] for p in parts[1:]} == {p.data["run_id"] for p in parts[:1]}
    final = parts[-1].data["data"]["output"]
    assert contents(final["messages"])[-1] == ("ai", ANSWER)
    assert contents(sdk.threads.get_state(thread)["values"]["messages"]) == contents(final["messages"])


def test_if_exists_and_if_not_exists(sdk, alice):
    thread_id = str(uuid.uuid4())
    made = sdk.threads.create(thread_id=thread_id, metadata={"first": 1})
    assert made["thread_id"] == thread_id
    with pytest.raises(ConflictError):
        sdk.threads.create(thread_id=thread_id)
    again = sdk.threads.create(thread_id=thread_id, if_exists="do_nothing", metadata={"second": 2})
    assert (again["thread_id"], again["metadata"]) == (thread_id, {"first": 1})

    unknown = str(uuid.uuid4())
    with pytest.raises(NotFoundError):  # if_not_exists defaults to reject
        sdk.runs.create(unknown, "helper", input=said("hello?"), context={"script": answer("hi", 0)})
    assert not Thread.objects.filter(pk=unknown).exists()
    run = sdk.runs.create(
        unknown, "helper", input=said("hello?"), if_not_exists="create", context={"script": answer("hi", 0)}
    )
    assert run["thread_id"] == unknown
    assert contents(sdk.runs.join(unknown, run["run_id"])["messages"]) == [("human", "hello?"), ("ai", "hi")]
    assert Thread.objects.get(pk=unknown).owner == alice[0]
    assert sdk.threads.get(unknown)["status"] == "idle"


def test_runs_delete_and_threads_delete_hide_but_keep(sdk, site):
    thread = sdk.threads.create()["thread_id"]
    done = sdk.runs.wait(thread, "helper", input=said("one"), context={"script": answer("first", 0)})
    assert contents(done["messages"])[-1] == ("ai", "first")
    (first,) = sdk.runs.list(thread)
    moving = sdk.runs.create(thread, "helper", input=said("two"), context={"script": slow()})
    wait_for(lambda: writing(moving["run_id"]), what="the second run's model call")
    with pytest.raises(ConflictError):
        sdk.runs.delete(thread, moving["run_id"])
    with pytest.raises(ConflictError):
        sdk.threads.delete(thread)
    sdk.runs.cancel(thread, moving["run_id"], wait=True)

    sdk.runs.delete(thread, first["run_id"])
    with pytest.raises(NotFoundError):
        sdk.runs.get(thread, first["run_id"])
    assert [r["run_id"] for r in sdk.runs.list(thread)] == [moving["run_id"]]
    assert api(site, f"runs/{first['run_id']}/").status_code == 200, "the audit keeps a deleted run"

    sdk.threads.delete(thread)
    with pytest.raises(NotFoundError):
        sdk.threads.get(thread)
    with pytest.raises(NotFoundError):
        sdk.runs.create(thread, "helper", input=said("three"), context={"script": answer("no", 0)})
    assert thread not in [t["thread_id"] for t in sdk.threads.search()]
    with pytest.raises(ConflictError):  # the id stays taken by the kept thread: never handed back
        sdk.threads.create(thread_id=thread, if_exists="do_nothing")
    assert AgentRun.objects.filter(thread_id=thread).count() == 2
    assert api(site, f"threads/{thread}/").status_code == 200, "the audit keeps a deleted thread"


def test_multitask_rollback_makes_the_run_404_and_keeps_it_in_the_api(sdk, site):
    thread = sdk.threads.create()["thread_id"]
    first = sdk.runs.create(thread, "helper", input=said("take long"), context={"script": slow()})
    wait_for(lambda: writing(first["run_id"]), what="the first run's model call")
    second = sdk.runs.create(
        thread, "helper", input=said("instead"), multitask_strategy="rollback", context={"script": answer("second", 0)}
    )
    assert contents(sdk.runs.join(thread, second["run_id"])["messages"]) == [("human", "instead"), ("ai", "second")]
    with pytest.raises(NotFoundError):
        sdk.runs.get(thread, first["run_id"])
    assert [r["run_id"] for r in sdk.runs.list(thread)] == [second["run_id"]]
    assert contents(sdk.threads.get_state(thread)["values"]["messages"]) == [("human", "instead"), ("ai", "second")]
    row = AgentRun.objects.get(pk=first["run_id"])
    assert (row.status, row.rolled_back) == ("cancelled", True)
    shown = api(site, f"runs/{first['run_id']}/")
    assert shown.status_code == 200 and shown.json()["thread"]["rolled_back"] is True


def test_cancel_without_wait_answers_once_the_cancel_commits(sdk, contract):
    thread = sdk.threads.create()["thread_id"]
    run = sdk.runs.create(thread, "helper", input=said("write forever"), context={"script": slow()})
    wait_for(lambda: writing(run["run_id"]), what="the model call to be in flight")
    sdk.runs.cancel(thread, run["run_id"], action="interrupt")
    cancels = [ex for ex in contract.seen if ex.path.endswith("/cancel")]
    assert [(ex.status, ex.answer["status"]) for ex in cancels] == [(202, "interrupted")], "answered without waiting"
    assert AgentRun.objects.get(pk=run["run_id"]).status == "cancelled", "the cancel had committed"
    row = wait_for(
        lambda: AgentRun.objects.filter(pk=run["run_id"], stopped_at__isnull=False).first(),
        timeout=20,
        what="the run to stop",
    )
    assert row.events.order_by("sequence").last().kind == "cancelled"
    assert row.events.get(kind="llm").payload["interrupted"] is True, "the 24 s call was cut short"
    assert sdk.runs.get(thread, run["run_id"])["status"] == "interrupted"


# 3/hour: the thread's create counts too (a /lg/ thread shares the create rate with the runs).
# (A CI run that crossed an hour's turn once got no 429: the limiter rounded the previous window's
# weighted count down. It rounds up now, so a window's turn lets nothing more through.)
@pytest.mark.parametrize("server_env", [{"NRLLM_THROTTLE_CREATE": "3/hour", "NRLLM_STREAM_MAX_PER_USER": "1"}])
def test_the_rest_apis_limits_are_the_sdks_rate_limit_error(sdk):
    thread = sdk.threads.create()["thread_id"]
    long = sdk.runs.create(thread, "helper", input=said("long"), context={"script": slow()})
    following = sdk.runs.join_stream(thread, long["run_id"], stream_mode="values")
    assert next(following).event == "metadata"  # the caller's one stream slot is held
    with pytest.raises(RateLimitError) as refused:
        next(sdk.runs.join_stream(thread, long["run_id"], stream_mode="values"))
    assert refused.value.response.headers.get("retry-after")
    with pytest.raises(httpx.HTTPStatusError) as refused:  # join and wait: the SDK raises httpx's own
        sdk.runs.join(thread, long["run_id"])
    assert refused.value.response.status_code == 429
    following.close()

    sdk.runs.create(
        thread, "helper", input=said("two"), multitask_strategy="enqueue", context={"script": answer("x", 0)}
    )
    with pytest.raises(RateLimitError) as refused:  # the fourth create within the hour
        sdk.runs.create(thread, "helper", input=said("three"), multitask_strategy="enqueue")
    assert refused.value.response.headers.get("retry-after")
    assert AgentRun.objects.filter(thread_id=thread).count() == 2, "a refused create starts nothing"
    sdk.runs.cancel(thread, long["run_id"], wait=True)


def test_a_failed_run_reads_error(sdk):
    thread = sdk.threads.create()["thread_id"]
    exhausted = [{"tool_calls": [{"name": "calculator", "arguments": {"expression": "1 + 1"}}]}]
    with pytest.raises(Exception, match="ProviderError: script exhausted"):  # the SDK raises __error__
        sdk.runs.wait(thread, "helper", input=said("fail"), context={"script": exhausted})
    values = sdk.runs.join(thread, sdk.runs.list(thread)[0]["run_id"])
    assert "exhausted" in values["__error__"]["message"]
    (run,) = sdk.runs.list(thread)
    assert run["status"] == "error"
    assert [r["run_id"] for r in sdk.runs.list(thread, status="error")] == [run["run_id"]]
    assert sdk.runs.list(thread, status="success") == []
    assert sdk.threads.get(thread)["status"] == "error"
    parts = list(sdk.runs.join_stream(thread, run["run_id"], stream_mode="values"))
    assert parts[-1].event == "error" and "exhausted" in parts[-1].data["message"]
    with pytest.raises(ConflictError):  # a failed run has nothing to cancel
        sdk.runs.cancel(thread, run["run_id"])
    assert AgentRun.objects.get(pk=run["run_id"]).status == "failed"
