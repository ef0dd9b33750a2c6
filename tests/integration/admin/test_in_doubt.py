"""A call in doubt decided from a run's admin page (issue 47), through Django's test client and
the real runtime: the page shows the call that may or may not have happened and the decisions;
``<id>/resolve/`` takes *it happened* (with its result) and *it did not happen*, the run's cancel
is the third; each asks the policy's approve rule and records who and why; bad input, a run no
longer waiting and one that waits for an approval instead are messages, nothing changed.

The run is put in doubt as in production (``tests.integration.doubt``); the admin hands the
decision to the queue, and this test plays the worker (``run_queued``)."""

from __future__ import annotations

import json

import pytest
from django.contrib import messages
from django.contrib.auth.models import Permission
from django.test import Client
from django.urls import reverse

from nrllm_agents.models import AgentRun, Note, RunStatus
from nrllm_agents.runtime.agent_runtime import Outcome
from tests.integration.doubt import doubted, lost_in_doubt, steps, unchanged  # noqa: F401  (a fixture)

pytestmark = pytest.mark.django_db

NOTE = [{"tool_calls": [{"name": "write_note", "arguments": {"title": "t", "body": "b"}}]}, {"content": "ok"}]


@pytest.fixture
def root(django_user_model):
    return django_user_model.objects.create_superuser("root", password="x")


def signed_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def change_url(run_id) -> str:
    return reverse("admin:nrllm_agents_agentrun_change", args=[run_id])


def resolve_url(run_id) -> str:
    return reverse("admin:nrllm_agents_agentrun_resolve", args=[run_id])


def shown(response) -> list[tuple[int, str]]:
    return [(m.level, m.message) for m in response.context["messages"]]


def test_the_page_names_the_call_in_doubt_and_offers_the_three_decisions(runtime, root, doubted):
    run_id = lost_in_doubt(runtime)
    page = signed_in(root).get(change_url(run_id)).content.decode()
    assert 'id="in-doubt"' in page and "A call may or may not have happened" in page
    assert "<code>slow_note</code>" in page and "pay the invoice" in page
    started = AgentRun.objects.get(pk=run_id).suspended_state["in_doubt"]["at"]
    assert f'<time datetime="{started}">' in page
    assert f'action="{resolve_url(run_id)}"' in page
    for button in ("happened-button", "not-happened-button", "doubt-cancel-link"):
        assert f'id="{button}"' in page
    assert "(a call in doubt: see the summary)" in page  # the pending approval field says so too

    waiting = runtime.run({"prompt": "note", "tools": ["write_note"], "script": NOTE})
    other = signed_in(root).get(change_url(waiting.run_id)).content.decode()
    assert 'id="in-doubt"' not in other and resolve_url(waiting.run_id) not in other


def test_it_happened_records_the_given_result_and_who_said_so(runtime, root, doubted):
    run_id = lost_in_doubt(runtime)
    response = signed_in(root).post(
        resolve_url(run_id),
        {"decision": "happened", "result": '{"note_id": 7}', "reason": "seen in the notes"},
        follow=True,
    )
    assert response.redirect_chain == [(change_url(run_id), 302)]
    assert shown(response) == [
        (
            messages.SUCCESS,
            "Recorded: the call of slow_note happened; its result is recorded and it is not made again; "
            "a worker resumes the run.",
        )
    ]
    assert AgentRun.objects.get(pk=run_id).status == RunStatus.QUEUED
    assert runtime.run_queued(run_id).outcome == Outcome.COMPLETED
    (tool,) = steps(run_id, "tool")
    assert tool["result"] == {"note_id": 7} and tool["in_doubt"] == "happened"
    (decision,) = steps(run_id, "approval")
    assert (decision["in_doubt"], decision["by"], decision["reason"]) == ("happened", "root", "seen in the notes")
    assert Note.objects.filter(run_id=run_id).count() == 1


def test_it_did_not_happen_makes_the_call_again(runtime, root, doubted):
    run_id = lost_in_doubt(runtime)
    response = signed_in(root).post(resolve_url(run_id), {"decision": "not_happened"}, follow=True)
    said = "Recorded: the call of slow_note did not happen; it is made again; a worker resumes the run."
    assert shown(response) == [(messages.SUCCESS, said)]
    assert runtime.run_queued(run_id).outcome == Outcome.COMPLETED
    assert steps(run_id, "approval")[0]["in_doubt"] == "not_happened"
    assert Note.objects.filter(run_id=run_id).count() == 2


def test_cancel_is_the_third_decision(runtime, root, doubted):
    run_id = lost_in_doubt(runtime)
    cancel = reverse("admin:nrllm_agents_agentrun_cancel", args=[run_id])
    response = signed_in(root).post(cancel, {"post": "yes", "reason": "refunded"}, follow=True)
    assert response.redirect_chain == [(change_url(run_id), 302)]
    run = AgentRun.objects.get(pk=run_id)
    assert (run.status, run.cancel_reason, run.cancelled_by) == (RunStatus.CANCELLED, "refunded", root)
    late = signed_in(root).post(resolve_url(run_id), {"decision": "not_happened"}, follow=True)
    [(level, text)] = shown(late)
    assert level == messages.WARNING and "cancelled" in text
    assert 'id="in-doubt"' not in late.content.decode()


def test_only_who_may_approve_decides_and_a_refusal_changes_nothing(runtime, alice, doubted, django_user_model):
    run_id = lost_in_doubt(runtime, owner=alice)
    decision = {"decision": "happened", "result": "null"}
    staff = django_user_model.objects.create_user("carol", password="x", is_staff=True)
    assert signed_in(staff).post(resolve_url(run_id), decision).status_code == 403
    page = signed_in(staff).get(change_url(run_id)).content.decode()
    assert 'id="doubt-not-yours"' in page and 'id="happened-button"' not in page
    outsider = signed_in(alice)  # not staff: the admin sends her to its sign-in
    assert outsider.post(resolve_url(run_id), decision)["Location"].startswith("/admin/login/")
    assert unchanged(run_id)

    staff.user_permissions.add(Permission.objects.get(codename="approve_agentrun"))
    assert signed_in(staff).post(resolve_url(run_id), decision).status_code == 302
    assert runtime.run_queued(run_id).outcome == Outcome.COMPLETED
    assert steps(run_id, "approval")[0]["by"] == "carol"


@pytest.mark.parametrize(
    ("post", "said"),
    [
        ({"decision": "happened", "result": "{not json"}, "result: not valid JSON: Expecting property name"),
        ({"decision": "happened", "result": json.dumps(["y" * 300_000])}, "result: too large: at most 256 KiB"),
        ({"decision": "happened", "result": ""}, "result: the call's result is needed when it happened"),
        ({"decision": "perhaps"}, "decision: Choose: it happened, or it did not."),
        ({"decision": "not_happened", "reason": "x" * 1001}, "reason: the reason is longer than 1000 characters"),
    ],
)
def test_bad_input_is_a_message_and_changes_nothing(runtime, root, doubted, post, said):
    run_id = lost_in_doubt(runtime)
    response = signed_in(root).post(resolve_url(run_id), post, follow=True)
    assert response.status_code == 200 and response.redirect_chain == [(change_url(run_id), 302)]
    [(level, text)] = shown(response)
    assert level == messages.ERROR and text.startswith("Not decided: ") and said in text, text
    assert text.endswith("Nothing was changed.")
    assert unchanged(run_id)


def test_a_run_that_waits_for_an_approval_a_finished_one_and_bad_ids_are_messages(runtime, root, doubted):
    client = signed_in(root)
    waiting = runtime.run({"prompt": "note", "tools": ["write_note"], "script": NOTE})
    response = client.post(resolve_url(waiting.run_id), {"decision": "happened", "result": "1"}, follow=True)
    assert shown(response) == [
        (
            messages.WARNING,
            f"Run {waiting.run_id} waits, but no call of it is in doubt: approve or deny it; nothing changed.",
        )
    ]
    assert AgentRun.objects.get(pk=waiting.run_id).status == RunStatus.WAITING_FOR_APPROVAL
    done = runtime.run({"prompt": "q", "script": [{"content": "42"}]})
    [(level, text)] = shown(client.post(resolve_url(done.run_id), {"decision": "not_happened"}, follow=True))
    assert level == messages.WARNING and "completed" in text
    assert client.get(resolve_url(done.run_id)).status_code == 405
    missing = client.post(resolve_url("1; drop table"), {"decision": "not_happened"}, follow=True)
    assert shown(missing) == [(messages.ERROR, "Not a run id: '1; drop table'. Nothing was changed.")]
