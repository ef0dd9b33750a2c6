"""A call in doubt through the Agent Protocol (issue 47): the thread's state shows it as an
interrupt that asks whether the call happened, and ``command={"resume": {"happened": ...}}``
decides it; an approval's resume is refused for it (409), and a bad one is a 422.

The run in doubt is the one a segment leaves (``suspended_state.in_doubt`` naming its pending
call): here a thread's run waiting on ``write_note``, as if its worker had been lost during it.
"""

from __future__ import annotations

import pytest
from django.utils import timezone

from nrllm_agents.models import AgentRun, AgentRunEvent, Note, RunStatus
from tests import waits
from tests.integration.agent_protocol.test_resume_reason import resume, waiting  # noqa: F401  (fixture)
from tests.integration.executors.test_queue import no_redis  # noqa: F401  (fixture)

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def doubted(waiting):  # noqa: F811
    client, thread_id, run_id = waiting
    run = AgentRun.objects.get(pk=run_id)
    call = run.suspended_state["pending_calls"][0]
    run.suspended_state = {**run.suspended_state, "in_doubt": {"call": call, "at": timezone.now().isoformat()}}
    run.save(update_fields=["suspended_state"])
    return client, thread_id, run_id


def test_the_state_asks_whether_the_call_happened_and_happened_completes_the_run(doubted):
    client, thread_id, run_id = doubted
    state = client.get(f"/lg/threads/{thread_id}/state").json()
    (interrupt,) = state["interrupts"]
    assert client.get(f"/lg/threads/{thread_id}").json()["interrupts"][str(run_id)] == [interrupt]
    assert interrupt["value"]["question"].startswith("Did this call happen?")
    assert interrupt["value"]["in_doubt"]["call"]["name"] == "write_note"
    answer = resume(client, thread_id, {"happened": True, "result": {"note_id": 99}, "reason": "it is in the list"})
    assert answer.status_code == 200, answer.content
    assert waits.wait_local_idle(30)
    run = AgentRun.objects.get(pk=run_id)
    assert run.status == RunStatus.COMPLETED and Note.objects.count() == 0  # not made again
    tool = AgentRunEvent.objects.get(run_id=run_id, kind="tool").payload
    assert tool["result"] == {"note_id": 99} and tool["in_doubt"] == "happened"
    decision = AgentRunEvent.objects.get(run_id=run_id, kind="approval").payload
    assert (decision["in_doubt"], decision["reason"], decision["by"]) == ("happened", "it is in the list", "carol")


def test_not_happened_makes_the_call_again(doubted):
    client, thread_id, run_id = doubted
    assert resume(client, thread_id, {"happened": False}).status_code == 200
    assert waits.wait_local_idle(30)
    assert AgentRun.objects.get(pk=run_id).status == RunStatus.COMPLETED and Note.objects.get().title == "plan"


@pytest.mark.parametrize(
    "value, status",
    [
        (True, 409),  # an approval, for a call in doubt
        ({"happened": "yes"}, 422),
        ({"happened": False, "result": 1}, 422),
    ],
)
def test_a_resume_of_the_wrong_kind_or_shape_changes_nothing(doubted, value, status):
    client, thread_id, run_id = doubted
    answer = resume(client, thread_id, value)
    assert answer.status_code == status and "detail" in answer.json(), answer.content
    assert AgentRun.objects.get(pk=run_id).status == RunStatus.WAITING_FOR_APPROVAL
    assert not AgentRunEvent.objects.filter(run_id=run_id, kind="approval").exists()
