"""What LangGraph's chat UI (create-agent-chat-app, agent-chat-ui) showed missing in ``/lg/``
(issue 48; the UI itself: tests/e2e/agent_protocol/test_chat_ui.py):

- its interrupt view needs LangGraph's ``HumanInterrupt`` (``action_request``, ``config``) to
  offer Accept, Ignore and a response;
- its Accept resumes with ``input: {}`` and the ``checkpoint`` of the state it shows;
- its Stop leaves the stream it opened with ``on_disconnect="cancel"``: the run is cancelled.
"""

from __future__ import annotations

import pytest

from nrllm_agents.models import AgentRun, AgentRunEvent, Note, RunStatus
from nrllm_agents.runtime import threads
from tests import waits
from tests.integration.agent_protocol.test_resume_reason import waiting  # noqa: F401  (fixture)
from tests.integration.executors.test_queue import no_redis  # noqa: F401  (fixture)

pytestmark = pytest.mark.django_db(transaction=True)

SLOW = [{"content": "word " * 400, "delay": 30.0}]


def test_a_waiting_run_s_interrupt_is_a_human_interrupt_the_ui_can_accept(waiting):  # noqa: F811
    client, thread_id, run_id = waiting
    state = client.get(f"/lg/threads/{thread_id}/state").json()
    (interrupt,) = state["interrupts"]
    value = interrupt["value"]
    assert value["action_request"] == {"action": "write_note", "args": {"title": "plan", "body": "ship it"}}
    assert value["config"] == {"allow_accept": True, "allow_ignore": True, "allow_respond": True, "allow_edit": False}
    assert value["tool_calls"][0]["name"] == "write_note"  # what other clients read stays

    body = {
        "assistant_id": "helper",
        "input": {},
        "command": {"resume": [{"type": "accept", "args": None}]},
        "checkpoint": state["checkpoint"],
        "stream_mode": ["messages-tuple", "values", "custom"],
        "on_disconnect": "cancel",
    }
    answer = client.post(f"/lg/threads/{thread_id}/runs", body, format="json")
    assert answer.status_code == 200, answer.content
    assert waits.wait_local_idle(30)
    assert AgentRun.objects.get(pk=run_id).status == RunStatus.COMPLETED
    assert Note.objects.get().title == "plan"


@pytest.mark.parametrize("where", [{"checkpoint_id": "not-one"}, {"checkpoint": {"checkpoint_id": "x.1"}}])
def test_a_checkpoint_other_than_the_latest_is_422_and_the_run_still_waits(waiting, where):  # noqa: F811
    client, thread_id, run_id = waiting
    body = {"assistant_id": "helper", "command": {"resume": True}, **where}
    answer = client.post(f"/lg/threads/{thread_id}/runs", body, format="json")
    assert answer.status_code == 422, answer.content
    assert "latest checkpoint" in answer.json()["detail"]
    assert AgentRun.objects.get(pk=run_id).status == RunStatus.WAITING_FOR_APPROVAL


@pytest.fixture
def client_and_thread(waiting):  # noqa: F811
    client, _, _ = waiting
    from django.contrib.auth import get_user_model

    return client, threads.create(owner=get_user_model().objects.get(username="carol")).pk


def started_stream(client, thread_id, **more):
    body = {"assistant_id": "helper", "input": {"messages": [{"role": "user", "content": "go on"}]}}
    body |= {"context": {"script": SLOW, "tools": []}, "stream_mode": ["values", "messages-tuple"], **more}
    response = client.post(f"/lg/threads/{thread_id}/runs/stream", body, format="json")
    assert response.status_code == 200, response.content
    first = next(iter(response.streaming_content)).decode()
    assert first.startswith("event: metadata"), first
    return response, AgentRun.objects.filter(thread_id=thread_id).latest("thread_position")


def test_a_stream_left_early_with_on_disconnect_cancel_cancels_its_run(client_and_thread):
    client, thread_id = client_and_thread
    response, run = started_stream(client, thread_id, on_disconnect="cancel")
    waits.wait_for(
        lambda: AgentRun.objects.get(pk=run.pk).status == RunStatus.RUNNING, timeout=30, what="the run running"
    )
    response.close()  # what the WSGI server does once a write to the departed client fails
    assert waits.wait_local_idle(30)
    row = AgentRun.objects.get(pk=run.pk)
    assert (row.status, row.cancel_source, row.cancelled_by_name) == (RunStatus.CANCELLED, "api", "carol")
    assert AgentRunEvent.objects.filter(run_id=run.pk, kind="cancelled").exists()


def test_a_stream_left_early_without_it_lets_the_run_go_on(client_and_thread):
    client, thread_id = client_and_thread
    response, run = started_stream(client, thread_id)
    waits.wait_for(
        lambda: AgentRun.objects.get(pk=run.pk).status == RunStatus.RUNNING, timeout=30, what="the run running"
    )
    response.close()
    assert AgentRun.objects.get(pk=run.pk).status == RunStatus.RUNNING
    client.post(f"/lg/threads/{thread_id}/runs/{run.pk}/cancel")  # the test's own end
    assert waits.wait_local_idle(30)


def test_on_disconnect_names_cancel_or_continue(client_and_thread):
    client, thread_id = client_and_thread
    body = {"assistant_id": "helper", "input": {"messages": [{"role": "user", "content": "hi"}]}, "on_disconnect": "x"}
    answer = client.post(f"/lg/threads/{thread_id}/runs/stream", body, format="json")
    assert answer.status_code == 422 and "on_disconnect" in answer.json()["detail"], answer.content
    assert not AgentRun.objects.filter(thread_id=thread_id).exists()


def test_a_run_labels_its_thread_and_a_graph_id_search_finds_an_assistant_s_threads(client_and_thread):
    client, thread_id = client_and_thread
    client.post("/lg/threads", {"metadata": {"topic": "t"}}, format="json")  # another thread, without a run
    body = {"assistant_id": "helper", "input": {"messages": [{"role": "user", "content": "hi"}]}}
    body["context"] = {"script": [{"content": "hello"}], "tools": []}
    assert client.post(f"/lg/threads/{thread_id}/runs", body, format="json").status_code == 200
    assert waits.wait_local_idle(30)
    labels = {"graph_id": "agent", "assistant_id": "helper"}
    assert client.get(f"/lg/threads/{thread_id}").json()["metadata"] == labels
    for wanted in ({"graph_id": "helper"}, {"assistant_id": "helper"}, {"graph_id": "agent"}):
        found = client.post("/lg/threads/search", {"metadata": wanted}, format="json").json()
        assert [t["thread_id"] for t in found] == [str(thread_id)], wanted
    assert client.post("/lg/threads/search", {"metadata": {"graph_id": "nobody"}}, format="json").json() == []


def test_only_a_client_leaving_calls_on_leave_not_the_stream_s_end_or_its_own_error():
    from nrllm_agents.agent_protocol.runs import left_early

    def frames(fail: bool = False):
        yield "a"
        yield "b"
        if fail:
            raise RuntimeError("the stream's own error")

    left: list[str] = []
    assert list(left_early(frames(), lambda: left.append("ended"))) == ["a", "b"]
    with pytest.raises(RuntimeError):
        list(left_early(frames(fail=True), lambda: left.append("failed")))
    assert left == []
    stream = left_early(frames(), lambda: left.append("left"))
    assert next(stream) == "a"
    stream.close()  # what the WSGI server does when a write to the client fails
    assert left == ["left"]
