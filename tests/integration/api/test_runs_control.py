"""Cancelling and approving single runs, and reading their step stream, through the API."""

from __future__ import annotations

import copy
import uuid

import pytest
from django.conf import settings
from django.test import override_settings

from nrllm_agents.models import AgentRun, AgentRunEvent, Note, RunStatus

pytestmark = pytest.mark.django_db


def url(run_id, action: str = "") -> str:
    return f"/api/runs/{run_id}/{action + '/' if action else ''}"


def cancel(client, run_id, **body):
    return client.post(url(run_id, "cancel"), body, format="json")


# --- cancel -------------------------------------------------------------------------------


@pytest.mark.parametrize("state", [RunStatus.QUEUED, RunStatus.WAITING_FOR_APPROVAL])
def test_cancelling_a_quiescent_run_is_200_and_it_is_stopped_at_once(alice, api, make_run, state):
    run = make_run(alice, state)
    response = cancel(api, run.pk, reason="not needed")
    assert response.status_code == 200, response.json()
    body = response.json()
    assert (body["outcome"], body["previous_status"], body["status"], body["stopping"]) == (
        "cancelled",
        state,
        "cancelled",
        False,
    )
    record = body["run"]["cancel"]
    assert (record["by"], record["source"], record["reason"]) == ("alice", "api", "not needed")
    assert record["requested_at"] and record["stopped_at"]
    assert body["run"]["pending_approval"] == []
    last = AgentRunEvent.objects.filter(run_id=run.pk).order_by("sequence").last()
    assert (last.kind, last.payload["source"], last.payload["by"]) == ("cancelled", "api", "alice")


def test_cancelling_an_executing_run_is_202_and_stopped_at_waits_for_the_boundary(alice, api, make_run):
    run = make_run(alice, RunStatus.RUNNING)
    response = cancel(api, run.pk)
    assert response.status_code == 202
    body = response.json()
    assert (body["outcome"], body["previous_status"], body["stopping"]) == ("cancelled", "running", True)
    assert "the step in flight is interrupted" in body["detail"]
    assert body["run"]["cancel"]["requested_at"] and body["run"]["cancel"]["stopped_at"] is None


def test_cancel_is_idempotent_and_says_already_cancelled(alice, api, make_run):
    run = make_run(alice)
    first = cancel(api, run.pk, reason="first")
    second = cancel(api, run.pk, reason="second")
    assert (first.status_code, second.status_code) == (200, 200)
    assert second.json()["outcome"] == "already_cancelled"
    assert second.json()["previous_status"] == "cancelled"
    # The first cancel's record stands; the stream has one cancelled step.
    assert second.json()["run"]["cancel"]["reason"] == "first"
    assert AgentRunEvent.objects.filter(run_id=run.pk, kind="cancelled").count() == 1


def test_cancelling_a_run_cancelled_elsewhere_is_200_already_cancelled(alice, api, make_run):
    run = make_run(alice, RunStatus.CANCELLED)
    response = cancel(api, run.pk)
    assert (response.status_code, response.json()["outcome"]) == (200, "already_cancelled")
    assert response.json()["run"]["cancel"]["source"] == "cli"


@pytest.mark.parametrize("state", [RunStatus.COMPLETED, RunStatus.FAILED])
def test_cancelling_a_finished_run_is_409_with_its_status_and_changes_nothing(alice, api, make_run, state):
    run = make_run(alice, state)
    before = AgentRun.objects.values().get(pk=run.pk)
    response = cancel(api, run.pk)
    assert response.status_code == 409
    body = response.json()
    assert (body["status"], body["outcome"], body["previous_status"]) == (state, "already_finished", state)
    assert state in body["detail"]
    assert AgentRun.objects.values().get(pk=run.pk) == before


@pytest.mark.parametrize(
    "run_id", [uuid.uuid4(), "123", "not-a-uuid"]
)  # a NUL id is refused at the edge (test_edge_refusals)
def test_cancelling_an_unknown_or_malformed_id_is_404(alice, api, run_id):
    response = cancel(api, run_id)
    assert (response.status_code, response.json()) == (404, {"detail": "Run not found."})


def test_staff_cancel_anyones_run_with_the_permission_and_are_recorded_as_the_canceller(
    alice, staff, client_for, make_run
):
    # Guards issue 9 finding 3: is_staff alone is not enough to act on another user's run.
    from django.contrib.auth.models import Permission

    run = make_run(alice)
    response = cancel(client_for(staff), run.pk)
    assert response.status_code == 403
    assert AgentRun.objects.get(pk=run.pk).status == RunStatus.QUEUED
    staff.user_permissions.add(Permission.objects.get(codename="cancel_agentrun"))
    staff = type(staff).objects.get(pk=staff.pk)
    response = cancel(client_for(staff), run.pk)
    assert response.status_code == 200
    assert response.json()["run"]["cancel"]["by"] == "operator"
    assert response.json()["run"]["owner"] == "alice"


@pytest.mark.parametrize("body", [{"reason": ["why"]}, {"reason": "x" * 2001}, {"reason": "a\x00b"}])
def test_a_bad_cancel_reason_is_400_and_the_run_is_untouched(alice, api, make_run, body):
    run = make_run(alice)
    response = cancel(api, run.pk, **body)
    assert response.status_code == 400
    assert list(response.json()) == ["reason"]
    assert AgentRun.objects.get(pk=run.pk).status == RunStatus.QUEUED


def test_cancelling_is_throttled_per_user_across_single_and_bulk_cancel(alice, api, make_run):
    runs = [make_run(alice) for _ in range(3)]
    rates = copy.deepcopy(settings.REST_FRAMEWORK)
    rates["DEFAULT_THROTTLE_RATES"]["run_cancel"] = "2/min"
    with override_settings(REST_FRAMEWORK=rates):
        assert cancel(api, runs[0].pk).status_code == 200
        assert api.post("/api/runs/cancel/", {"ids": [str(runs[1].pk)]}, format="json").status_code == 200
        throttled = cancel(api, runs[2].pk)
        assert throttled.status_code == 429 and "detail" in throttled.json()
        assert api.get(url(runs[2].pk)).status_code == 200  # reading is not throttled
    assert AgentRun.objects.get(pk=runs[2].pk).status == RunStatus.QUEUED


# --- approve ------------------------------------------------------------------------------


def test_approving_a_waiting_run_resumes_it_here(alice, api, make_run):
    run = make_run(alice, RunStatus.WAITING_FOR_APPROVAL)
    response = api.post(url(run.pk, "approve"), {"approved": True}, format="json")
    assert response.status_code == 200, response.json()
    body = response.json()
    assert (body["outcome"], body["status"], body["final_text"]) == ("completed", "completed", "noted")
    assert Note.objects.filter(run_id=run.pk, title="t").exists()
    approval = AgentRunEvent.objects.get(run_id=run.pk, kind="approval")
    assert (approval.payload["approved"], approval.payload["by"]) == (True, "alice")


def test_denying_a_waiting_run_runs_nothing_and_records_why(alice, api, make_run):
    run = make_run(alice, RunStatus.WAITING_FOR_APPROVAL)
    response = api.post(url(run.pk, "approve"), {"approved": False, "reason": "not today"}, format="json")
    assert response.status_code == 200
    assert response.json()["status"] == "completed"
    assert not Note.objects.exists()
    approval = AgentRunEvent.objects.get(run_id=run.pk, kind="approval")
    assert (approval.payload["approved"], approval.payload["reason"]) == (False, "not today")


def test_a_queued_approval_is_202_and_hands_the_run_to_the_queue(alice, api, make_run, redis_url):
    import django_rq

    run = make_run(alice, RunStatus.WAITING_FOR_APPROVAL)
    with override_settings(REDIS_URL=redis_url, RQ_QUEUES={"default": {"URL": redis_url}}):
        response = api.post(url(run.pk, "approve"), {"approved": True, "queued": True}, format="json")
        assert response.status_code == 202
        assert (response.json()["outcome"], response.json()["status"]) == ("queued", "queued")
        jobs = django_rq.get_queue("default").get_jobs()
        assert [list(job.args) for job in jobs] == [[str(run.pk)]]
    assert not Note.objects.exists()  # nothing ran here


@pytest.mark.parametrize("state", [RunStatus.QUEUED, RunStatus.COMPLETED, RunStatus.CANCELLED, RunStatus.RUNNING])
def test_approving_a_run_that_is_not_waiting_is_409_with_its_status(alice, api, make_run, state):
    run = make_run(alice, state)
    response = api.post(url(run.pk, "approve"), {"approved": True}, format="json")
    assert response.status_code == 409
    assert response.json() == {
        "detail": f"Run {run.pk} is {state}, not waiting for approval; nothing changed.",
        "run_id": str(run.pk),
        "status": state,
    }
    assert AgentRun.objects.get(pk=run.pk).status == state


def test_a_cancelled_waiting_run_cannot_be_approved(alice, api, make_run):
    run = make_run(alice, RunStatus.WAITING_FOR_APPROVAL)
    assert cancel(api, run.pk).status_code == 200
    response = api.post(url(run.pk, "approve"), {"approved": True}, format="json")
    assert (response.status_code, response.json()["status"]) == (409, "cancelled")
    assert not Note.objects.exists()


@pytest.mark.parametrize(
    "body", [{}, {"approved": "perhaps"}, {"approved": True, "queued": []}, {"approved": False, "reason": 7}]
)
def test_a_bad_approve_body_is_400(alice, api, make_run, body):
    run = make_run(alice, RunStatus.WAITING_FOR_APPROVAL)
    response = api.post(url(run.pk, "approve"), body, format="json")
    assert response.status_code == 400
    assert AgentRun.objects.get(pk=run.pk).status == RunStatus.WAITING_FOR_APPROVAL


def test_approving_an_unknown_run_is_404(api):
    response = api.post(url(uuid.uuid4(), "approve"), {"approved": True}, format="json")
    assert (response.status_code, response.json()) == (404, {"detail": "Run not found."})


# --- events -------------------------------------------------------------------------------


def test_the_step_stream_pages_by_sequence(alice, api, make_run):
    run = make_run(alice, RunStatus.WAITING_FOR_APPROVAL)
    api.post(url(run.pk, "approve"), {"approved": True}, format="json")
    recorded = list(AgentRunEvent.objects.filter(run_id=run.pk).order_by("sequence").values_list("sequence", "kind"))
    assert len(recorded) >= 5

    seen, after, pages = [], -1, 0
    while True:
        page = api.get(url(run.pk, "events"), {"after": after, "limit": 2}).json()
        assert len(page["results"]) <= 2
        seen += [(e["sequence"], e["kind"]) for e in page["results"]]
        after, pages = page["next_after"], pages + 1
        if not page["has_more"]:
            break
    assert seen == recorded
    assert pages == (len(recorded) + 1) // 2
    assert page["finished"] is True and page["status"] == "completed"

    tail = api.get(url(run.pk, "events"), {"after": recorded[-1][0]}).json()
    assert (tail["results"], tail["next_after"], tail["has_more"]) == ([], recorded[-1][0], False)
    first = api.get(url(run.pk, "events")).json()["results"][0]
    assert set(first) == {"run_id", "sequence", "kind", "round", "duration_ms", "payload", "created_at"}
    assert (first["sequence"], first["kind"], first["run_id"]) == (0, "request", str(run.pk))


def test_an_executing_cancelled_run_is_not_finished_until_acknowledged(alice, api, make_run):
    run = make_run(alice, RunStatus.RUNNING)
    cancel(api, run.pk)
    page = api.get(url(run.pk, "events")).json()
    assert (page["status"], page["finished"]) == ("cancelled", False)


@pytest.mark.parametrize(
    "params, field",
    [
        ({"after": -2}, "after"),
        ({"after": "x"}, "after"),
        ({"limit": 0}, "limit"),
        ({"limit": 1001}, "limit"),
        ({"after": 2**31}, "after"),
    ],
)
def test_bad_event_paging_is_400(alice, api, make_run, params, field):
    run = make_run(alice)
    response = api.get(url(run.pk, "events"), params)
    assert response.status_code == 400
    assert list(response.json()) == [field]
