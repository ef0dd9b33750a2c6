"""A call in doubt decided from the playground (issue 47), through Django's test client and the
real runtime: the run page shows the call that may or may not have happened and its three
decisions (never Approve/Deny); each decision asks the approve rule of the policy and is recorded
with who and why; bad input, a run no longer waiting and a run that waits for an approval instead
are answered with a message, nothing changed.

The run is put in doubt as in production (``tests.integration.doubt``); the decision is handed to
the queue, and this test plays the worker (``run_queued``): its rows are never committed."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth.models import Permission
from django.test import Client

from nrllm_agents.models import AgentRun, Note, RunStatus
from nrllm_agents.runtime.agent_runtime import Outcome
from tests.integration.doubt import doubted, lost_in_doubt, steps, unchanged  # noqa: F401  (a fixture)

pytestmark = pytest.mark.django_db

JSON = {"Accept": "application/json"}
NOTE = [{"tool_calls": [{"name": "write_note", "arguments": {"title": "t", "body": "b"}}]}, {"content": "ok"}]


def signed_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def url(run_id, action: str = "") -> str:
    return f"/playground/runs/{run_id}/{action + '/' if action else ''}"


def test_the_run_page_shows_the_call_in_doubt_and_its_three_decisions_not_approve(runtime, alice, doubted):
    run_id = lost_in_doubt(runtime, owner=alice)
    page = signed_in(alice).get(url(run_id)).content.decode()
    assert "A call may or may not have happened" in page and 'id="in-doubt"' in page
    assert "<code>slow_note</code>" in page and "pay the invoice" in page  # the tool and its arguments
    started = AgentRun.objects.get(pk=run_id).suspended_state["in_doubt"]["at"]
    assert f'<time datetime="{started}">' in page  # when the call started
    for button in ("happened-button", "not-happened-button", "doubt-cancel-button"):
        assert f'id="{button}"' in page
    assert f'formaction="{url(run_id, "cancel")}"' in page  # the third decision is the cancel
    assert 'id="approve-button"' not in page and 'id="deny-button"' not in page
    assert "paused (a call in doubt)" in page

    waiting = runtime.run({"prompt": "note", "tools": ["write_note"], "script": NOTE}, owner=alice)
    other = signed_in(alice).get(url(waiting.run_id)).content.decode()
    assert 'id="approve-button"' in other and 'id="in-doubt"' not in other  # only a run in doubt shows them


def test_it_happened_records_the_given_result_and_the_call_is_not_made_again(runtime, alice, doubted):
    run_id = lost_in_doubt(runtime, owner=alice)
    response = signed_in(alice).post(
        url(run_id, "resolve"),
        {"decision": "happened", "result": '{"note_id": 41}', "reason": "the note is there"},
        headers=JSON,
    )
    assert response.status_code == 202, response.content
    body = response.json()
    assert body["message"] == (
        "Recorded: the call of slow_note happened; its result is recorded and it is not made again; "
        "a worker resumes the run."
    )
    assert body["run"]["status"] == RunStatus.QUEUED
    assert runtime.run_queued(run_id).outcome == Outcome.COMPLETED
    (tool,) = steps(run_id, "tool")
    assert tool["result"] == {"note_id": 41} and tool["in_doubt"] == "happened"
    (decision,) = steps(run_id, "approval")
    assert (decision["in_doubt"], decision["by"], decision["reason"]) == ("happened", "alice", "the note is there")
    assert Note.objects.filter(run_id=run_id).count() == 1  # not made again


def test_it_did_not_happen_makes_the_call_again(runtime, alice, doubted):
    run_id = lost_in_doubt(runtime, owner=alice)
    page = signed_in(alice).post(url(run_id, "resolve"), {"decision": "not_happened"}, follow=True)  # no JavaScript
    assert page.redirect_chain == [(url(run_id), 302)]
    said = "Recorded: the call of slow_note did not happen; it is made again; a worker resumes the run."
    assert said in page.content.decode()
    assert runtime.run_queued(run_id).outcome == Outcome.COMPLETED
    (decision,) = steps(run_id, "approval")
    assert (decision["in_doubt"], decision["by"]) == ("not_happened", "alice") and "result" not in decision
    assert Note.objects.filter(run_id=run_id).count() == 2  # made again, as the person said


def test_cancel_is_the_third_decision(runtime, alice, doubted):
    run_id = lost_in_doubt(runtime, owner=alice)
    response = signed_in(alice).post(url(run_id, "cancel"), {"reason": "refunded by hand"}, headers=JSON)
    assert response.status_code == 200 and response.json()["outcome"] == "cancelled"
    run = AgentRun.objects.get(pk=run_id)
    assert (run.status, run.cancel_reason, run.cancelled_by) == (RunStatus.CANCELLED, "refunded by hand", alice)
    refused = signed_in(alice).post(url(run_id, "resolve"), {"decision": "not_happened"}, headers=JSON)
    assert refused.status_code == 409 and "cancelled" in refused.json()["message"]  # no longer waiting


def test_only_who_may_approve_decides_and_a_refusal_changes_nothing(runtime, alice, bob, doubted, django_user_model):
    run_id = lost_in_doubt(runtime, owner=alice)
    decision = {"decision": "happened", "result": "null"}
    assert signed_in(bob).post(url(run_id, "resolve"), decision).status_code == 404  # not bob's to see
    staff = django_user_model.objects.create_user("carol", password="x", is_staff=True)
    refused = signed_in(staff).post(url(run_id, "resolve"), decision, headers=JSON)
    assert refused.status_code == 403
    page = signed_in(staff).post(url(run_id, "resolve"), decision, follow=True)  # without JavaScript: a message
    assert page.redirect_chain == [(url(run_id), 302)] and b"permission" in page.content
    seen = signed_in(staff).get(url(run_id)).content.decode()
    assert 'id="doubt-not-yours"' in seen and 'id="happened-button"' not in seen
    assert unchanged(run_id)

    staff.user_permissions.add(Permission.objects.get(codename="approve_agentrun"))
    assert signed_in(staff).post(url(run_id, "resolve"), decision, headers=JSON).status_code == 202
    assert runtime.run_queued(run_id).outcome == Outcome.COMPLETED
    assert steps(run_id, "approval")[0]["by"] == "carol"


@pytest.mark.parametrize(
    ("post", "said"),
    [
        ({"decision": "happened", "result": "{not json"}, "result: not valid JSON: Expecting property name"),
        ({"decision": "happened", "result": json.dumps({"x": "y" * 300_000})}, "result: too large: at most 256 KiB"),
        ({"decision": "happened", "result": "[" * 40 + "]" * 40}, "result: JSON nested deeper than 32 levels"),
        ({"decision": "happened", "result": ""}, "result: the call's result is needed when it happened"),
        ({"decision": "maybe"}, "decision: Choose: it happened, or it did not."),
        ({}, "decision: Choose: it happened, or it did not."),
        ({"decision": "not_happened", "reason": "x" * 1001}, "reason: the reason is longer than 1000 characters"),
    ],
)
def test_bad_input_is_a_message_and_changes_nothing(runtime, alice, doubted, post, said):
    run_id = lost_in_doubt(runtime, owner=alice)
    client = signed_in(alice)
    refused = client.post(url(run_id, "resolve"), post, headers=JSON)
    assert refused.status_code == 400 and said in refused.json()["message"], refused.content
    page = client.post(url(run_id, "resolve"), post, follow=True)  # without JavaScript
    assert page.status_code == 200 and page.redirect_chain == [(url(run_id), 302)]
    assert "Not decided: " in page.content.decode()
    assert unchanged(run_id)


def test_each_kind_of_wait_takes_only_its_own_decision(runtime, alice, doubted):
    run_id = lost_in_doubt(runtime, owner=alice)
    client = signed_in(alice)
    approved = client.post(url(run_id, "approve"), {"decision": "approve"}, headers=JSON)
    assert approved.status_code == 409 and "in doubt" in approved.json()["message"]
    assert unchanged(run_id)

    waiting = runtime.run({"prompt": "note", "tools": ["write_note"], "script": NOTE}, owner=alice)
    resolved = client.post(url(waiting.run_id, "resolve"), {"decision": "happened", "result": "1"}, headers=JSON)
    assert resolved.status_code == 409 and "approve or deny" in resolved.json()["message"]
    page = client.post(url(waiting.run_id, "resolve"), {"decision": "not_happened"}, follow=True)
    assert b"approve or deny it; nothing changed." in page.content
    assert AgentRun.objects.get(pk=waiting.run_id).status == RunStatus.WAITING_FOR_APPROVAL

    done = runtime.run({"prompt": "q", "script": [{"content": "42"}]}, owner=alice)
    finished = client.post(url(done.run_id, "resolve"), {"decision": "not_happened"}, headers=JSON)
    assert finished.status_code == 409 and "completed" in finished.json()["message"]
