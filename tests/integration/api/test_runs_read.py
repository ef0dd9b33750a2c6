"""Reading runs through the API: authentication, visibility, the run's page, list filters, paging."""

from __future__ import annotations

import io
import uuid
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.urls import resolve
from django.utils import timezone
from rest_framework.test import APIClient

from nrllm_agents.api.stream import run_stream
from nrllm_agents.models import AgentRun, RunStatus

pytestmark = pytest.mark.django_db

LIST = "/api/runs/"


def detail(run_id) -> str:
    return f"/api/runs/{run_id}/"


def test_anonymous_callers_get_401_with_a_token_challenge(alice, make_run):
    run = make_run(alice)
    client = APIClient()
    for method, url in [
        ("get", LIST),
        ("post", LIST),
        ("get", detail(run.pk)),
        ("post", detail(run.pk) + "cancel/"),
        ("post", detail(run.pk) + "approve/"),
        ("get", detail(run.pk) + "events/"),
        ("post", "/api/runs/cancel/"),
    ]:
        response = getattr(client, method)(url, {}, format="json")
        assert response.status_code == 401, (method, url)
        assert response["WWW-Authenticate"] == "Token"
        assert "detail" in response.json()
    assert AgentRun.objects.get(pk=run.pk).status == RunStatus.QUEUED


def test_a_bad_token_is_401(alice):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Token not-a-real-token")
    response = client.get(LIST)
    assert response.status_code == 401
    assert response.json()["detail"] == "Invalid token."


def test_a_token_made_with_drfs_command_authenticates(alice, make_run):
    out = io.StringIO()
    call_command("drf_create_token", "alice", stdout=out)
    key = out.getvalue().split()[2]  # "Generated token <key> for user alice"
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    run = make_run(alice)
    assert client.get(detail(run.pk)).json()["owner"] == "alice"


def test_the_stream_path_is_the_stream_not_a_run_view():
    """The API routes the browser stream itself (``nrllm_api:run-stream``); no DRF run view takes it."""
    match = resolve(f"/api/runs/{uuid.uuid4()}/stream/")
    assert match.func is run_stream and match.view_name == "nrllm_api:run-stream"


def test_token_and_session_auth_both_work(alice, api, make_run):
    run = make_run(alice)
    assert api.get(detail(run.pk)).json()["run_id"] == str(run.pk)
    session = APIClient()
    session.force_login(alice)
    assert session.get(detail(run.pk)).json()["run_id"] == str(run.pk)


def test_session_writes_need_the_csrf_token(alice, make_run):
    run = make_run(alice)
    session = APIClient(enforce_csrf_checks=True)
    session.force_login(alice)
    response = session.post(detail(run.pk) + "cancel/", {}, format="json")
    assert response.status_code == 403
    assert "CSRF" in response.json()["detail"]
    assert AgentRun.objects.get(pk=run.pk).status == RunStatus.QUEUED


def test_another_users_run_is_404_exactly_like_an_unknown_one(alice, bob, api, make_run):
    theirs = make_run(bob)
    unknown = api.get(detail(uuid.uuid4()))
    hidden = api.get(detail(theirs.pk))
    malformed = api.get(detail("not-a-uuid"))
    assert unknown.status_code == hidden.status_code == malformed.status_code == 404
    assert unknown.json() == hidden.json() == malformed.json() == {"detail": "Run not found."}
    for suffix in ("events/",):
        assert api.get(detail(theirs.pk) + suffix).json() == unknown.json()
    for suffix, body in (("cancel/", {}), ("approve/", {"approved": True})):
        response = api.post(detail(theirs.pk) + suffix, body, format="json")
        assert (response.status_code, response.json()) == (404, {"detail": "Run not found."})
    assert AgentRun.objects.get(pk=theirs.pk).status == RunStatus.QUEUED


def test_the_list_shows_only_the_callers_runs_and_staff_see_all(alice, bob, staff, api, client_for, make_run):
    mine = {str(make_run(alice).pk) for _ in range(2)}
    theirs = str(make_run(bob).pk)
    listed = api.get(LIST).json()
    assert {r["run_id"] for r in listed["results"]} == mine
    everything = client_for(staff).get(LIST).json()
    assert {r["run_id"] for r in everything["results"]} == mine | {theirs}
    # Staff act on others' runs too.
    assert client_for(staff).get(detail(theirs)).status_code == 200


def test_a_runs_page_shows_request_usage_timestamps_and_owner(alice, api, make_run):
    run = make_run(alice, RunStatus.COMPLETED, prompt="say done")
    body = api.get(detail(run.pk)).json()
    assert body["status"] == "completed"
    assert body["termination_reason"] == "completed"
    assert body["final_text"] == "done"
    assert body["usage"] == {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}
    assert body["owner"] == "alice"
    assert body["request"]["prompt"] == "say done"
    assert body["request"]["provider"] == "scripted"
    assert body["request"]["tools"] == []
    assert body["request"]["script"] == [{"content": "done", "usage": {"prompt_tokens": 5, "completion_tokens": 2}}]
    assert body["created_at"] and body["started_at"] and body["finished_at"]
    assert body["cancel"] is None
    assert body["pending_approval"] == []


def test_a_waiting_runs_page_lists_the_calls_awaiting_a_decision(alice, api, make_run):
    run = make_run(alice, RunStatus.WAITING_FOR_APPROVAL)
    body = api.get(detail(run.pk)).json()
    assert body["status"] == "waiting_for_approval"
    assert [(c["name"], c["arguments"]) for c in body["pending_approval"]] == [
        ("write_note", {"title": "t", "body": "b"})
    ]


def test_the_list_filters_by_status_reason_and_creation_time(alice, api, make_run):
    queued = make_run(alice, RunStatus.QUEUED)
    done = make_run(alice, RunStatus.COMPLETED)
    failed = make_run(alice, RunStatus.FAILED)
    cancelled = make_run(alice, RunStatus.CANCELLED)

    def ids(**params) -> set[str]:
        response = api.get(LIST, params)
        assert response.status_code == 200, response.json()
        return {r["run_id"] for r in response.json()["results"]}

    assert ids(status="queued") == {str(queued.pk)}
    assert ids(status=["completed", "failed"]) == {str(done.pk), str(failed.pk)}
    assert ids(termination_reason="cancelled") == {str(cancelled.pk)}
    assert ids(termination_reason="provider_failed") == {str(failed.pk)}

    # Pin creation times so the window filters are exact.
    base = timezone.now() - timedelta(days=10)
    for offset, run in enumerate([queued, done, failed, cancelled]):
        AgentRun.objects.filter(pk=run.pk).update(created_at=base + timedelta(days=offset))
    middle = (base + timedelta(days=1)).isoformat()
    assert ids(created_after=middle) == {str(done.pk), str(failed.pk), str(cancelled.pk)}
    assert ids(created_before=middle) == {str(queued.pk)}
    assert ids(created_after=middle, created_before=(base + timedelta(days=2)).isoformat()) == {str(done.pk)}


def five_runs_a_minute_apart(owner, make_run) -> list[str]:
    """Their ids, newest first."""
    base = timezone.now() - timedelta(hours=1)
    runs = [make_run(owner) for _ in range(5)]
    for minute, run in enumerate(runs):
        AgentRun.objects.filter(pk=run.pk).update(created_at=base + timedelta(minutes=minute))
    return [str(r.pk) for r in reversed(runs)]


def test_the_list_is_newest_first_and_paginated(alice, api, make_run):
    newest_first = five_runs_a_minute_apart(alice, make_run)

    first = api.get(LIST, {"page_size": 2}).json()
    assert "count" not in first  # no page counts the whole list (issue 45)
    assert [r["run_id"] for r in first["results"]] == newest_first[:2]
    assert first["previous"] is None
    second = api.get(first["next"]).json()
    assert "cursor=" in first["next"] and "page_size=2" in first["next"]
    assert [r["run_id"] for r in second["results"]] == newest_first[2:4]
    third = api.get(second["next"]).json()
    assert [r["run_id"] for r in third["results"]] == newest_first[4:]
    assert third["next"] is None
    # The way back, page by page: a run created meanwhile shifts no page, it comes before them.
    newer = make_run(alice)
    back = api.get(third["previous"]).json()
    assert [r["run_id"] for r in back["results"]] == newest_first[2:4]
    front = api.get(back["previous"]).json()
    assert [r["run_id"] for r in front["results"]] == newest_first[:2]
    before = api.get(front["previous"]).json()
    assert [r["run_id"] for r in before["results"]] == [str(newer.pk)]
    assert before["previous"] is None


def test_the_numbered_pages_clients_followed_still_answer(alice, api, make_run):
    newest_first = five_runs_a_minute_apart(alice, make_run)
    second = api.get(LIST, {"page_size": 2, "page": 2}).json()
    assert [r["run_id"] for r in second["results"]] == newest_first[2:4]
    assert [r["run_id"] for r in api.get(second["next"]).json()["results"]] == newest_first[4:]
    assert [r["run_id"] for r in api.get(second["previous"]).json()["results"]] == newest_first[:2]


def test_a_page_past_the_end_is_a_json_404(alice, api, make_run):
    make_run(alice)
    response = api.get(LIST, {"page": 99})
    assert response.status_code == 404
    assert "detail" in response.json()


@pytest.mark.parametrize(
    "params, field, says",
    [
        ({"status": "sleeping"}, "status", "not a valid choice"),
        ({"termination_reason": "bored"}, "termination_reason", "not a valid choice"),
        ({"created_after": "yesterday"}, "created_after", "RFC 3339"),
        ({"created_before": "2024-13-45"}, "created_before", "RFC 3339"),
        ({"created_before": "2024-01-31T08:00:00"}, "created_before", "with an offset"),
        ({"created_before": ""}, "created_before", "RFC 3339"),
        ({"status": ""}, "status", "not a valid choice"),
        ({"page": "0"}, "page", "from 1"),
        ({"page": ""}, "page", "from 1"),
        ({"page_size": "x"}, "page_size", "from 1 to 200"),
        ({"page_size": "201"}, "page_size", "from 1 to 200"),
        ({"cursor": "nonsense"}, "cursor", "not a position of this list"),
        ({"cursor": "e30"}, "cursor", "not a position of this list"),  # {}
        ({"cursor": "eyJ2IjoieCIsImsiOiJ5IiwiYiI6ZmFsc2V9"}, "cursor", "not a position of this list"),
    ],
)
def test_bad_filters_are_400_naming_the_field(alice, api, params, field, says):
    response = api.get(LIST, params)
    assert response.status_code == 400
    assert list(response.json()) == [field]
    assert says in response.json()[field][0]
