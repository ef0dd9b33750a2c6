"""POST /api/runs/{id}/resolve/: a person decides on a call in doubt through the REST API (issue
47). The run shows the call (``in_doubt``); each decision resumes it; bad bodies are 400s naming
the field, a run of another kind of wait a 409, another user's run a 404, and nothing changes."""

from __future__ import annotations

import uuid

import pytest

from nrllm_agents import store
from nrllm_agents.models import AgentRun, AgentRunEvent, RunStatus
from tests.integration.runs import expire
from tests.integration.runtime.test_in_doubt import CHARGE, NOTE, Charge, charge  # noqa: F401  (fixture)

pytestmark = pytest.mark.django_db


@pytest.fixture
def in_doubt(runtime, charge, alice):  # noqa: F811
    """Alice's run, in doubt about its charge."""

    run_id = runtime.enqueue({"prompt": "charge it", "tools": ["charge"], "script": CHARGE}, owner=alice)
    with pytest.raises(SystemExit):
        runtime.run_queued(run_id)
    expire(run_id)
    store.reap()
    runtime.run_queued(run_id)
    assert AgentRun.objects.get(pk=run_id).status == RunStatus.WAITING_FOR_APPROVAL
    return run_id


def resolve(api, run_id: uuid.UUID, body: dict):
    return api.post(f"/api/runs/{run_id}/resolve/", body, format="json")


def test_the_run_names_its_call_in_doubt_and_it_happened_completes_it(api, in_doubt, alice):
    shown = api.get(f"/api/runs/{in_doubt}/").json()
    assert shown["status"] == "waiting_for_approval"
    assert shown["in_doubt"]["call"]["name"] == "charge" and shown["in_doubt"]["call"]["arguments"] == {"cents": 500}
    answer = resolve(api, in_doubt, {"happened": True, "result": {"charge": "ch_9"}, "reason": "in the dashboard"})
    assert answer.status_code == 200, answer.content
    assert answer.json()["outcome"] == "completed" and answer.json()["in_doubt"] is None
    assert Charge.made == 1
    decision = AgentRunEvent.objects.get(run_id=in_doubt, kind="approval").payload
    assert (decision["in_doubt"], decision["by"], decision["reason"]) == ("happened", "alice", "in the dashboard")


def test_it_did_not_happen_queued_makes_the_call_in_a_worker(api, in_doubt, runtime):
    answer = resolve(api, in_doubt, {"happened": False, "queued": True})
    assert answer.status_code == 202 and answer.json()["outcome"] == "queued", answer.content
    assert runtime.run_queued(in_doubt).outcome == "completed" and Charge.made == 2


@pytest.mark.parametrize(
    "body, field",
    [
        ({}, "happened"),
        ({"happened": "yes"}, "happened"),
        ({"happened": False, "result": {"x": 1}}, "result"),
        ({"happened": True, "result": "x" * 300_000}, "result"),
        ({"happened": True, "colour": "blue"}, "non_field_errors"),  # "unknown fields: colour"
    ],
)
def test_a_bad_body_is_a_400_that_names_the_field_and_changes_nothing(api, in_doubt, body, field):
    answer = resolve(api, in_doubt, body)
    assert answer.status_code == 400 and field in answer.json(), answer.content  # the API's 400: field -> messages
    assert AgentRun.objects.get(pk=in_doubt).status == RunStatus.WAITING_FOR_APPROVAL
    assert not AgentRunEvent.objects.filter(run_id=in_doubt, kind="approval").exists()


def test_another_users_run_is_not_found_and_an_approval_wait_is_a_409(in_doubt, client_for, bob, alice, api, runtime):
    assert resolve(client_for(bob), in_doubt, {"happened": True}).status_code == 404
    gated = runtime.run({"prompt": "note", "tools": ["write_note"], "script": NOTE}, owner=alice)
    conflict = resolve(api, gated.run_id, {"happened": True})
    assert conflict.status_code == 409 and "approve or deny" in conflict.json()["detail"], conflict.content
    mismatch = api.post(f"/api/runs/{in_doubt}/approve/", {"approved": True}, format="json")
    assert mismatch.status_code == 409 and "in doubt" in mismatch.json()["detail"], mismatch.content
    assert AgentRun.objects.get(pk=in_doubt).status == RunStatus.WAITING_FOR_APPROVAL
