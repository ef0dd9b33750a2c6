"""The REST API's limits fields and ``POST /api/runs/{id}/fork/`` (PostgreSQL and SQLite)."""

from __future__ import annotations

import pytest

from nrllm_agents.models import AgentRun, CancelSource, RunStatus

pytestmark = pytest.mark.django_db

TWO_CALLS = {
    "tool_calls": [
        {"name": "calculator", "arguments": {"expression": "1+1"}},
        {"name": "calculator", "arguments": {"expression": "2+2"}},
    ]
}


@pytest.fixture
def cancelled_run(runtime, alice):
    """alice's run, cancelled by her at the boundary after the model asked for two tool calls."""

    def observe(step):
        if step["kind"] == "llm":
            runtime.cancel(step["run_id"], source=CancelSource.API)

    result = runtime.run(
        {"prompt": "add", "tools": ["calculator"], "script": [TWO_CALLS, {"content": "4"}], "max_total_tokens": 500},
        owner=alice,
        on_step=observe,
    )
    return AgentRun.objects.get(pk=result.run_id)


def test_limits_are_request_fields_and_show_on_the_run(api):
    response = api.post(
        "/api/runs/",
        {
            "prompt": "p",
            "tools": [],
            "script": [{"content": "x"}],
            "deadline_seconds": 60,
            "max_total_tokens": 1000,
            "mode": "sync",
        },
        format="json",
    )
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["limits"]["deadline_seconds"] == 60 and body["limits"]["max_total_tokens"] == 1000
    assert body["limits"]["deadline_at"] and body["parent"] is None and body["children"] == []


@pytest.mark.parametrize(
    "field, bad",
    [("deadline_seconds", 0), ("deadline_seconds", "9"), ("max_total_tokens", 10**9), ("max_total_tokens", None)],
)
def test_bad_limits_are_400(api, field, bad):
    response = api.post("/api/runs/", {"prompt": "p", field: bad}, format="json")
    assert response.status_code == 400 and field in response.json()


def test_a_budget_cancel_is_shown_as_a_system_cancel_naming_the_limit(api):
    script = [
        {
            "tool_calls": [{"name": "calculator", "arguments": {"expression": "1"}}],
            "usage": {"prompt_tokens": 80, "completion_tokens": 40},
        },
        {"content": "x"},
    ]
    body = api.post(
        "/api/runs/",
        {"prompt": "p", "tools": ["calculator"], "script": script, "max_total_tokens": 100, "mode": "sync"},
        format="json",
    ).json()
    assert (body["status"], body["termination_reason"], body["outcome"]) == (
        "cancelled",
        "budget_exceeded",
        "cancelled",
    )
    assert body["cancel"]["source"] == "system" and body["cancel"]["by"] is None
    assert body["cancel"]["limit"] == {"limit": "max_total_tokens", "value": 100, "measured": 120, "unit": "tokens"}
    listed = api.get("/api/runs/", {"termination_reason": "budget_exceeded"}).json()["results"]
    assert [r["run_id"] for r in listed] == [body["run_id"]]


def test_fork_sync_completes_and_links_parent_and_child(api, cancelled_run):
    response = api.post(f"/api/runs/{cancelled_run.pk}/fork/", {"mode": "sync"}, format="json")
    assert response.status_code == 201, response.json()
    fork = response.json()
    assert fork["status"] == "completed" and fork["final_text"] == "4" and fork["outcome"] == "completed"
    assert fork["parent"] == {"run_id": str(cancelled_run.pk), "from_sequence": 1}
    assert fork["limits"]["max_total_tokens"] == 500  # copied from the parent
    assert response["Location"] == f"/api/runs/{fork['run_id']}/"
    parent = api.get(f"/api/runs/{cancelled_run.pk}/").json()
    assert parent["children"] == [fork["run_id"]] and parent["status"] == "cancelled"
    events = api.get(f"/api/runs/{fork['run_id']}/events/").json()["results"]
    assert [e["kind"] for e in events] == ["forked", "request", "llm"]


def test_fork_queued_with_overrides(api, cancelled_run, settings, redis_url):
    settings.REDIS_URL = redis_url  # a queue no worker reads: the fork stays queued
    settings.RQ_QUEUES = {"default": {"URL": redis_url}}
    response = api.post(
        f"/api/runs/{cancelled_run.pk}/fork/",
        {"from_sequence": 0, "max_iterations": 3, "deadline_seconds": 30, "tools": []},
        format="json",
    )
    assert response.status_code == 202, response.json()
    fork = response.json()
    assert fork["status"] == "queued" and fork["outcome"] == "queued"
    assert fork["request"]["max_iterations"] == 3 and fork["request"]["tools"] == []
    assert fork["limits"]["deadline_seconds"] == 30 and fork["parent"]["from_sequence"] == 0


def test_fork_errors(api, client_for, bob, cancelled_run, make_run, alice):
    url = f"/api/runs/{cancelled_run.pk}/fork/"
    assert client_for(bob).post(url, {}, format="json").status_code == 404  # bob may not see it
    assert api.post("/api/runs/not-a-uuid/fork/", {}, format="json").status_code == 404
    for bad in ("1", -1, True, 1.5):
        response = api.post(url, {"from_sequence": bad}, format="json")
        assert response.status_code == 400 and "from_sequence" in response.json(), bad
    response = api.post(url, {"from_sequence": 99}, format="json")
    assert response.status_code == 400 and "no step 99" in response.json()["from_sequence"][0]
    response = api.post(url, {"prompt": "x"}, format="json")
    assert response.status_code == 400
    waiting = make_run(alice, RunStatus.WAITING_FOR_APPROVAL)
    response = api.post(f"/api/runs/{waiting.pk}/fork/", {}, format="json")
    assert response.status_code == 409 and response.json()["status"] == "waiting_for_approval"
    assert AgentRun.objects.filter(parent__isnull=False).count() == 0


def test_a_fork_by_staff_is_not_listed_to_the_owner_of_the_parent(client_for, api, staff, cancelled_run):
    response = client_for(staff).post(f"/api/runs/{cancelled_run.pk}/fork/", {"mode": "sync"}, format="json")
    assert response.status_code == 201
    assert api.get(f"/api/runs/{cancelled_run.pk}/").json()["children"] == []  # alice may not see staff's run
    assert client_for(staff).get(f"/api/runs/{cancelled_run.pk}/").json()["children"] == [response.json()["run_id"]]
