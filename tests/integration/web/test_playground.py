"""The playground views through Django's test client: sign-in, permissions, CSRF, starting,
cancelling and approving runs with and without JavaScript, and ``agent_bootstrap``."""

from __future__ import annotations

import io
import uuid

import pytest
from django.core.management import CommandError, call_command
from django.test import Client

from nrllm_agents import store
from nrllm_agents.models import AgentRun, CancelSource, Note, RunStatus, TerminationReason
from nrllm_agents.web import interactive
from tests import waits

JSON = {"Accept": "application/json"}
QUICK = '[{"tool_calls": [{"name": "calculator", "arguments": {"expression": "6*7"}}]}, {"content": "42"}]'
NOTE = (
    '[{"tool_calls": [{"name": "write_note", "arguments": {"title": "hello", "body": "from the playground"}}]},'
    ' {"content": "finished"}]'
)
SLOW = (
    "["
    + ", ".join(['{"tool_calls": [{"name": "sleep", "arguments": {"seconds": 0.2}}]}'] * 40)
    + ', {"content": "done"}]'
)


def form(
    script: str = QUICK, tools: tuple[str, ...] = ("calculator",), mode: str = "interactive", **extra: str
) -> dict:
    return {
        "prompt": "six times seven",
        "provider": "scripted",
        "model": "",
        "tools": list(tools),
        "max_iterations": "50",
        "script": script,
        "mode": mode,
        **extra,
    }


@pytest.fixture
def web(settings):
    settings.REDIS_URL = None  # queued runs execute in this process's executor
    settings.NRLLM_AGENTS = {"STREAM_POLL_SECONDS": 0.02}
    yield settings
    assert interactive.wait_idle(30), "an interactive run is still executing"
    assert waits.wait_local_idle(30)


def signed_in(user, **kwargs) -> Client:
    client = Client(**kwargs)
    client.force_login(user)
    return client


def only_run() -> AgentRun:
    [run] = AgentRun.objects.all()
    return run


def waiting_run(runtime, owner) -> AgentRun:
    result = runtime.run({"prompt": "note", "script": NOTE, "tools": ["write_note"]}, owner=owner)
    assert result.status == RunStatus.WAITING_FOR_APPROVAL
    return AgentRun.objects.get(pk=result.run_id)


# --- sign-in and who sees what --------------------------------------------------------------
@pytest.mark.django_db
def test_anonymous_users_are_sent_to_sign_in_and_scripts_get_401(web):
    client = Client()
    response = client.get("/playground/")
    assert response.status_code == 302 and response["Location"] == "/accounts/login/?next=/playground/"
    assert client.post("/playground/runs/", form(), headers=JSON).status_code == 401
    assert client.post("/playground/runs/", form()).status_code == 302
    assert not AgentRun.objects.exists()


@pytest.mark.django_db
def test_signing_in_leads_to_the_playground(alice, web):
    client = Client()
    assert client.get("/accounts/login/").status_code == 200
    response = client.post("/accounts/login/", {"username": "alice", "password": "alice-pw"})
    assert response.status_code == 302 and response["Location"] == "/playground/"
    page = client.get("/playground/")
    assert page.status_code == 200
    assert b'id="run-form"' in page.content and b"Start run" in page.content


@pytest.mark.django_db
def test_recent_runs_list_only_the_users_own(runtime, alice, bob, web):
    runtime.run({"prompt": "alice's question", "script": QUICK, "tools": ["calculator"]}, owner=alice)
    runtime.run({"prompt": "bob's secret", "script": QUICK, "tools": ["calculator"]}, owner=bob)
    page = signed_in(alice).get("/playground/").content.decode()
    assert "alice&#x27;s question" in page and "bob&#x27;s secret" not in page


@pytest.mark.django_db
def test_another_users_run_is_404_for_every_action_but_staff_may_act(runtime, alice, bob, web, django_user_model):
    run = waiting_run(runtime, alice)
    url = f"/playground/runs/{run.pk}/"
    intruder = signed_in(bob)
    assert intruder.get(url).status_code == 404
    assert intruder.post(url + "cancel/").status_code == 404
    assert intruder.post(url + "cancel/", headers=JSON).json() == {"detail": "Not found."}
    assert intruder.post(url + "approve/", {"decision": "approve"}).status_code == 404
    assert signed_in(alice).get(f"/playground/runs/{uuid.uuid4()}/").status_code == 404
    run.refresh_from_db()
    assert run.status == RunStatus.WAITING_FOR_APPROVAL  # nothing happened to it

    # Staff see it; acting on it takes the dedicated permission (issue 9 finding 3).
    from django.contrib.auth.models import Permission

    staff = django_user_model.objects.create_user("carol", password="x", is_staff=True)
    assert signed_in(staff).get(url).status_code == 200
    assert signed_in(staff).post(url + "cancel/", headers=JSON).status_code == 403
    assert signed_in(staff).post(url + "approve/", {"decision": "approve"}, headers=JSON).status_code == 403
    staff.user_permissions.add(Permission.objects.get(codename="cancel_agentrun"))
    response = signed_in(staff).post(url + "cancel/", headers=JSON)
    assert response.status_code == 200 and response.json()["outcome"] == "cancelled"
    run.refresh_from_db()
    assert run.cancelled_by == staff and run.cancel_source == CancelSource.PLAYGROUND


# --- CSRF ------------------------------------------------------------------------------------
# With the token, the start executes in a background thread of the web process: data must be committed.
@pytest.mark.django_db(transaction=True)
def test_actions_need_the_csrf_token(runtime, alice, web):
    client = signed_in(alice, enforce_csrf_checks=True)
    assert client.post("/playground/runs/", form()).status_code == 403
    assert client.post("/playground/runs/", form(), headers=JSON).status_code == 403
    assert not AgentRun.objects.exists()
    run = waiting_run(runtime, alice)
    assert client.post(f"/playground/runs/{run.pk}/cancel/").status_code == 403
    assert client.post(f"/playground/runs/{run.pk}/approve/", {"decision": "deny"}).status_code == 403
    run.refresh_from_db()
    assert run.status == RunStatus.WAITING_FOR_APPROVAL

    client.get("/playground/")  # sets the CSRF cookie, as a browser would
    token = client.cookies["csrftoken"].value
    response = client.post(f"/playground/runs/{run.pk}/cancel/", {"csrfmiddlewaretoken": token})
    assert response.status_code == 302
    response = client.post("/playground/runs/", form(), headers={**JSON, "X-CSRFToken": token})
    assert response.status_code == 201


# --- starting runs ---------------------------------------------------------------------------
# Interactive runs execute in a background thread of the web process: data must be committed.
@pytest.mark.django_db(transaction=True)
def test_without_javascript_the_form_starts_a_run_and_the_page_shows_its_stored_stream(alice, web):
    client = signed_in(alice)
    response = client.post("/playground/runs/", form())
    run = only_run()
    assert response.status_code == 302 and response["Location"] == f"/playground/runs/{run.pk}/"
    assert interactive.wait_idle(30)
    run.refresh_from_db()
    assert run.owner == alice and run.status == RunStatus.COMPLETED and run.claimed_by.startswith("interactive:")

    page = client.get(response["Location"]).content.decode()
    assert page.count('class="step kind-') == run.events.count() == 5  # request, llm, tool, request, llm
    assert 'data-kind="tool"' in page and "6*7" in page and "42" in page
    assert 'id="refresh-link"' not in page  # finished: nothing more to fetch
    assert "Run started." in page


@pytest.mark.django_db
def test_the_page_of_an_active_run_offers_a_refresh_link_without_javascript(alice, web):
    run = store.create_queued(
        {"prompt": "waiting for a worker", "provider": "scripted", "owner": alice}, {"prompt": "waiting for a worker"}
    )
    page = signed_in(alice).get(f"/playground/runs/{run.pk}/").content.decode()
    assert 'id="refresh-link"' in page and 'data-live="true"' in page
    assert 'id="cancel-form"' in page and 'id="cancel-form" hidden' not in page


# A thread executes the run: data must be committed.
@pytest.mark.django_db(transaction=True)
def test_scripts_get_json_with_the_run_and_its_stream(alice, web):
    response = signed_in(alice).post("/playground/runs/", form(), headers=JSON)
    assert response.status_code == 201
    body = response.json()
    run_id = uuid.UUID(body["run_id"])
    assert body["url"] == f"/playground/runs/{run_id}/"
    assert body["stream_url"] == f"/api/runs/{run_id}/stream/"
    assert body["run"]["run_id"] == str(run_id)


# The in-process executor executes the queued run in a thread: data must be committed.
@pytest.mark.django_db(transaction=True)
def test_a_queued_run_is_executed_by_the_executor_not_the_web_thread(alice, web):
    response = signed_in(alice).post("/playground/runs/", form(mode="queued"), headers=JSON)
    assert response.status_code == 202
    assert waits.wait_local_idle(30)
    run = only_run()
    assert run.status == RunStatus.COMPLETED and run.claimed_by.startswith("worker:")


# The dispatch is the on-commit hook of the run's creation: it must really commit.
@pytest.mark.django_db(transaction=True)
def test_a_queued_start_while_the_queue_is_unreachable_is_a_success_that_says_it_waits(alice, web, settings):
    """Issue 20 item 14: the run was settled enqueue_failed and the playground answered 503."""
    dead = "redis://127.0.0.1:1/13"  # nothing listens on port 1
    settings.REDIS_URL, settings.RQ_QUEUES = dead, {"default": {"URL": dead}}
    response = signed_in(alice).post("/playground/runs/", form(mode="queued"), headers=JSON)
    assert response.status_code == 202
    body = response.json()
    assert body["outcome"] == "waiting_for_queue" and "once the queue is back" in body["message"]
    assert (only_run().status, only_run().termination_reason) == (RunStatus.QUEUED, "")


@pytest.mark.django_db
@pytest.mark.parametrize(
    "changes, field",
    [
        ({"script": "[{"}, "script"),
        ({"script": '[{"bogus": 1}]'}, "script"),
        ({"tools": ["no_such_tool"]}, "tools"),
        ({"prompt": "   "}, "prompt"),
        ({"max_iterations": "0"}, "max_iterations"),
        ({"mode": "later"}, "mode"),
    ],
)
def test_bad_input_is_refused_per_field_and_nothing_is_created(alice, web, changes, field):
    client = signed_in(alice)
    response = client.post("/playground/runs/", form(**changes), headers=JSON)
    assert response.status_code == 400
    assert list(response.json()["errors"]) == [field]
    page = client.post("/playground/runs/", form(**changes))
    assert page.status_code == 400 and b"errorlist" in page.content
    if field != "prompt":
        assert b"six times seven" in page.content  # what was typed is kept
    assert not AgentRun.objects.exists()


# --- cancelling ------------------------------------------------------------------------------
# A thread executes the run while the cancel arrives: data must be committed.
@pytest.mark.django_db(transaction=True)
def test_cancel_of_an_executing_run_is_202_and_it_stops_at_a_boundary(runtime, alice, web):
    client = signed_in(alice)
    run_id = client.post("/playground/runs/", form(script=SLOW, tools=("sleep",)), headers=JSON).json()["run_id"]
    response = client.post(f"/playground/runs/{run_id}/cancel/", {"reason": "too slow"}, headers=JSON)
    assert response.status_code == 202
    assert response.json()["outcome"] == "cancelled" and response.json()["previous_status"] == "running"
    assert interactive.wait_idle(30)
    run = AgentRun.objects.get(pk=run_id)
    assert run.status == RunStatus.CANCELLED and run.stopped_at is not None
    assert (run.cancelled_by, run.cancel_source, run.cancel_reason) == (alice, "playground", "too slow")
    assert runtime.events(run_id)[-1].kind == "cancelled"
    assert run.iterations < 40


@pytest.mark.django_db
def test_cancel_maps_every_outcome(runtime, alice, web):
    client = signed_in(alice)
    run = waiting_run(runtime, alice)
    url = f"/playground/runs/{run.pk}/cancel/"
    first = client.post(url, headers=JSON)
    assert first.status_code == 200 and first.json()["run"]["status"] == "cancelled"
    again = client.post(url, headers=JSON)
    assert again.status_code == 200 and again.json()["outcome"] == "already_cancelled"

    done = runtime.run({"prompt": "q", "script": QUICK, "tools": ["calculator"]}, owner=alice)
    finished = client.post(f"/playground/runs/{done.run_id}/cancel/", headers=JSON)
    assert finished.status_code == 409 and finished.json()["outcome"] == "already_finished"
    assert AgentRun.objects.get(pk=done.run_id).status == RunStatus.COMPLETED

    page = client.post(url, follow=True)  # without JavaScript: back to the run page, with a message
    assert page.redirect_chain == [(f"/playground/runs/{run.pk}/", 302)]
    assert b"already cancelled" in page.content


# --- approving -------------------------------------------------------------------------------
# The resumed segment executes in a background thread: data must be committed.
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("decision", ["approve", "deny"])
def test_approve_or_deny_resumes_an_interactive_run_in_the_web_process(runtime, alice, web, decision):
    run = waiting_run(runtime, alice)
    response = signed_in(alice).post(f"/playground/runs/{run.pk}/approve/", {"decision": decision}, headers=JSON)
    assert response.status_code == 202
    assert interactive.wait_idle(30)
    run.refresh_from_db()
    approval = next(e for e in runtime.events(run.pk) if e.kind == "approval")
    assert approval.payload["by"] == "alice" and approval.payload["approved"] is (decision == "approve")
    assert run.status == RunStatus.COMPLETED and run.termination_reason == TerminationReason.COMPLETED
    assert Note.objects.filter(run=run).exists() is (decision == "approve")
    assert run.claimed_by.startswith("resume:")


@pytest.mark.django_db(transaction=True)
def test_the_approval_records_the_reason_given_and_refuses_one_it_cannot_record(runtime, alice, web):
    run = waiting_run(runtime, alice)
    client, url = signed_in(alice), f"/playground/runs/{run.pk}/approve/"
    refused = client.post(url, {"decision": "deny", "reason": "x" * 1001}, headers=JSON)
    assert refused.status_code == 400 and "longer than 1000" in refused.json()["message"]
    page = client.post(url, {"decision": "deny", "reason": "y" * 1001}, follow=True)  # without JavaScript
    assert b"Not decided: the reason is longer than 1000 characters (1001)." in page.content
    assert client.post(url, {"decision": "deny", "reason": "a\x00b"}).status_code == 400  # the edge guard's
    assert AgentRun.objects.get(pk=run.pk).status == RunStatus.WAITING_FOR_APPROVAL
    assert client.post(url, {"decision": "deny", "reason": "not this week"}, headers=JSON).status_code == 202
    assert interactive.wait_idle(30)
    approval = next(e for e in runtime.events(run.pk) if e.kind == "approval")
    assert (approval.payload["approved"], approval.payload["by"], approval.payload["reason"]) == (
        False,
        "alice",
        "not this week",
    )


# The worker (in-process executor) resumes it in another thread: data must be committed.
@pytest.mark.django_db(transaction=True)
def test_a_queued_run_waiting_for_approval_is_resumed_through_the_queue(runtime, alice, web):
    run_id = runtime.enqueue({"prompt": "note", "script": NOTE, "tools": ["write_note"]}, owner=alice)
    assert waits.wait_local_idle(30)
    assert AgentRun.objects.get(pk=run_id).status == RunStatus.WAITING_FOR_APPROVAL
    response = signed_in(alice).post(f"/playground/runs/{run_id}/approve/", {"decision": "approve"}, headers=JSON)
    assert response.status_code == 202 and "worker" in response.json()["message"]
    assert waits.wait_local_idle(30)
    run = AgentRun.objects.get(pk=run_id)
    assert run.status == RunStatus.COMPLETED and run.claimed_by.startswith("worker:")
    assert Note.objects.filter(run=run).count() == 1


# approve() claims the run in the background thread it executes in: data must be committed.
@pytest.mark.django_db(transaction=True)
def test_approve_refuses_a_run_that_is_not_waiting_and_a_missing_decision(runtime, alice, web):
    client = signed_in(alice)
    done = runtime.run({"prompt": "q", "script": QUICK, "tools": ["calculator"]}, owner=alice)
    url = f"/playground/runs/{done.run_id}/approve/"
    refused = client.post(url, {"decision": "approve"}, headers=JSON)
    assert refused.status_code == 409 and "completed" in refused.json()["message"]
    assert client.post(url, {"decision": "maybe"}, headers=JSON).status_code == 400
    assert client.post(url, {"decision": "approve"}).status_code == 302  # without JavaScript


# --- agent_bootstrap -------------------------------------------------------------------------
@pytest.mark.django_db
def test_bootstrap_creates_a_superuser_once_and_prints_its_password_once(django_user_model):
    first = io.StringIO()
    call_command("agent_bootstrap", stdout=first)
    admin = django_user_model.objects.get(username="admin")
    assert admin.is_superuser and admin.is_staff
    [password] = [
        line.split("password:")[1].split()[0] for line in first.getvalue().splitlines() if "password:" in line
    ]
    assert admin.check_password(password)
    assert "/playground/" in first.getvalue()

    second = io.StringIO()
    call_command("agent_bootstrap", stdout=second)
    assert "password:" not in second.getvalue() and password not in second.getvalue()
    # issue 48: a lost password is not the end: every start says how to set a new one
    assert "manage.py changepassword admin sets a new one" in second.getvalue()
    assert "/playground/" in second.getvalue()
    assert django_user_model.objects.filter(is_superuser=True).count() == 1


@pytest.mark.django_db
def test_bootstrap_refuses_to_take_over_an_ordinary_admin_user(django_user_model):
    django_user_model.objects.create_user("admin", password="x")
    with pytest.raises(CommandError, match="not a superuser"):
        call_command("agent_bootstrap", stdout=io.StringIO())
    assert not django_user_model.objects.filter(is_superuser=True).exists()
