"""A decision sent through the Agent Protocol's ``command={"resume": ...}`` carries its reason to
the approval step, in each shape a LangGraph client sends it.

``transaction=True``: the resumed run executes on a thread of the in-process executor, with a
connection of its own that only sees committed rows.
"""

from __future__ import annotations

from typing import Any

import pytest
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from nrllm_agents.catalog import agents
from nrllm_agents.models import AgentRun, AgentRunEvent, Note, RunStatus
from nrllm_agents.runtime import threads
from tests import waits
from tests.integration.executors.test_queue import no_redis  # noqa: F401  (fixture)

pytestmark = pytest.mark.django_db(transaction=True)

NOTE = [
    {"tool_calls": [{"name": "write_note", "arguments": {"title": "plan", "body": "ship it"}}]},
    {"content": "Noted."},
]


@pytest.fixture
def waiting(runtime, django_user_model, no_redis):  # noqa: F811
    """A client of the protocol, and a thread whose run waits for an approval."""
    user = django_user_model.objects.create_user(username="carol")
    agents.save("helper", {"provider": "scripted", "tools": ["write_note"]}, description="demo")
    thread = threads.create(owner=user)
    run_id = runtime.post(thread.pk, {"prompt": "take a note", "tools": ["write_note"], "script": NOTE}, owner=user)
    assert waits.wait_local_idle(30)
    assert AgentRun.objects.get(pk=run_id).status == RunStatus.WAITING_FOR_APPROVAL
    client = APIClient()
    client.credentials(HTTP_X_API_KEY=Token.objects.create(user=user).key)
    return client, thread.pk, run_id


def resume(client: APIClient, thread_id: Any, value: Any) -> Any:
    body = {"assistant_id": "helper", "command": {"resume": value}}
    return client.post(f"/lg/threads/{thread_id}/runs", body, format="json")


@pytest.mark.parametrize(
    "value",
    [
        {"approved": False, "reason": "not this week"},
        {"type": "reject", "message": "not this week"},  # LangChain's human-in-the-loop decision
        [{"type": "response", "args": "not this week"}],  # agent-chat-ui's answer in words
    ],
)
def test_a_denial_through_command_records_its_reason_on_the_approval_step(waiting, value):
    client, thread_id, run_id = waiting
    answer = resume(client, thread_id, value)
    assert answer.status_code == 200, answer.content
    assert waits.wait_local_idle(30)
    approval = AgentRunEvent.objects.get(run_id=run_id, kind="approval").payload
    assert (approval["approved"], approval["reason"], approval["by"]) == (False, "not this week", "carol")
    assert Note.objects.count() == 0, "a denied call never ran"


def test_an_approval_may_say_why_and_a_bare_one_records_no_reason(waiting):
    client, thread_id, run_id = waiting
    assert resume(client, thread_id, {"approved": True, "reason": "looks right"}).status_code == 200
    assert waits.wait_local_idle(30)
    approval = AgentRunEvent.objects.get(run_id=run_id, kind="approval").payload
    assert (approval["approved"], approval["reason"]) == (True, "looks right")
    assert Note.objects.get().title == "plan"


@pytest.mark.parametrize("reason", [7, "x\x00y", "x" * 10_000])
def test_a_reason_that_cannot_be_recorded_is_422_and_the_run_still_waits(waiting, reason):
    client, thread_id, run_id = waiting
    answer = resume(client, thread_id, {"approved": False, "reason": reason})
    assert answer.status_code == 422, answer.content
    assert AgentRun.objects.get(pk=run_id).status == RunStatus.WAITING_FOR_APPROVAL
