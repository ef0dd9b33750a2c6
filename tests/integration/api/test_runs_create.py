"""Starting runs through the API: queued and sync modes, validation, enqueue failure, throttling."""

from __future__ import annotations

import copy
import json

import pytest
from django.conf import settings
from django.test import override_settings

from nrllm_agents.models import AgentRun, AgentRunEvent, RunStatus

from .conftest import ANSWER, NOTE_THEN_ANSWER

LIST = "/api/runs/"


@pytest.mark.django_db
@override_settings(REDIS_URL=None)  # the in-process executor
def test_queued_mode_is_the_default_and_answers_202_with_the_run(alice, api):
    response = api.post(LIST, {"prompt": "add", "script": ANSWER, "tools": ["calculator"]}, format="json")
    assert response.status_code == 202, response.json()
    body = response.json()
    assert body["status"] == "queued"
    # issue 48: no worker exists here, and the answer does not say one starts it
    assert "this process starts it now" in body["detail"] and "a worker starts it" not in body["detail"]
    assert body["owner"] == "alice"
    assert body["request"]["tools"] == ["calculator"]
    assert response["Location"] == f"/api/runs/{body['run_id']}/"
    run = AgentRun.objects.get(pk=body["run_id"])
    assert (run.status, run.owner.username, run.request_payload["prompt"]) == (RunStatus.QUEUED, "alice", "add")


@pytest.mark.django_db
def test_sync_mode_runs_it_here_and_answers_201_with_the_settled_run_and_outcome(alice, api):
    response = api.post(LIST, {"prompt": "answer", "script": ANSWER, "tools": [], "mode": "sync"}, format="json")
    assert response.status_code == 201, response.json()
    body = response.json()
    assert (body["outcome"], body["status"], body["termination_reason"]) == ("completed", "completed", "completed")
    assert body["final_text"] == "done"
    assert body["usage"]["total_tokens"] == 7
    kinds = list(AgentRunEvent.objects.filter(run_id=body["run_id"]).values_list("kind", flat=True))
    assert kinds == ["request", "llm"]


@pytest.mark.django_db
def test_sync_mode_that_needs_approval_answers_with_the_pending_calls(alice, api):
    response = api.post(
        LIST, {"prompt": "note", "script": NOTE_THEN_ANSWER, "tools": ["write_note"], "mode": "sync"}, format="json"
    )
    assert response.status_code == 201
    body = response.json()
    assert (body["outcome"], body["status"]) == ("awaiting_approval", "waiting_for_approval")
    assert [c["name"] for c in body["pending_approval"]] == ["write_note"]


@pytest.mark.django_db
@pytest.mark.parametrize(
    "body, errors",
    [
        ({}, {"prompt"}),
        ({"prompt": "   "}, {"prompt"}),
        ({"prompt": "x", "tools": ["calculator", "rm_rf"]}, {"tools"}),
        ({"prompt": "x", "tools": "calculator"}, {"tools"}),
        ({"prompt": "x", "max_iterations": 0}, {"max_iterations"}),
        ({"prompt": "x", "max_iterations": "3"}, {"max_iterations"}),
        ({"prompt": "x", "provider": "nope"}, {"provider"}),
        ({"prompt": "x", "mode": "later"}, {"mode"}),
        ({"prompt": "x", "script": [{"content": "a", "tool_calls": []}]}, {"script"}),
        ({"prompt": "x", "script": [{"content": "a", "usage": {"prompt_tokens": 10**12}}]}, {"script"}),
        ({"prompt": "x", "colour": "blue"}, {"non_field_errors"}),
        ({"prompt": 5, "max_iterations": -1, "mode": 1}, {"prompt", "max_iterations", "mode"}),
    ],
)
def test_bad_fields_are_400_with_a_message_per_field_and_nothing_is_stored(alice, api, body, errors):
    response = api.post(LIST, body, format="json")
    assert response.status_code == 400
    assert set(response.json()) == errors
    for messages in response.json().values():
        assert isinstance(messages, list) and all(isinstance(m, str) and m for m in messages)
    assert not AgentRun.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize(
    "body, field",
    [
        ({"prompt": "x", "script": [{"content": "a\x00b"}]}, "script"),
        ({"prompt": "x", "system": "\x00"}, "system"),
        ({"prompt": "x", "script": [{"tool_calls": [{"name": "calculator", "arguments": {"e\x00": 1}}]}]}, "script"),
        ({"prompt": "x", "model": "\ud800"}, "model"),
    ],
)
def test_characters_the_database_cannot_store_are_400_not_500(alice, api, body, field):
    # Each of these would make PostgreSQL refuse the row (a 500) if it reached the store.
    # json.dumps escapes them (\u0000, \ud800) as a client would.
    response = api.post(LIST, json.dumps({**body, "mode": "sync"}), content_type="application/json")
    assert response.status_code == 400
    assert list(response.json()) == [field]
    assert not AgentRun.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize(
    "raw, content_type",
    [
        ('{"prompt": "x",', "application/json"),
        ("[1, 2]", "application/json"),
        ('"just a string"', "application/json"),
        ('{"prompt": NaN}', "application/json"),
    ],
)
def test_bad_json_is_400_with_a_detail_or_a_body_error(alice, api, raw, content_type):
    response = api.post(LIST, raw, content_type=content_type)
    assert response.status_code == 400
    body = response.json()
    assert "detail" in body or body == {"non_field_errors": ["expected a JSON object"]}
    assert not AgentRun.objects.exists()


@pytest.mark.django_db
def test_a_form_body_is_415_unsupported(alice, api):
    response = api.post(LIST, {"prompt": "x"})  # multipart, not JSON
    assert response.status_code == 415
    assert "detail" in response.json()
    assert not AgentRun.objects.exists()


# transaction=True: enqueue wakes the queue when the transaction commits; it must really commit
# for the outage to be met inside the request.
@pytest.mark.django_db(transaction=True)
def test_an_unreachable_queue_is_still_202_and_the_run_waits_queued(alice, api):
    # Nothing listens on port 1: the Redis connection is refused at once.
    dead = "redis://127.0.0.1:1/13"
    with override_settings(REDIS_URL=dead, RQ_QUEUES={"default": {"URL": dead}}):
        response = api.post(LIST, {"prompt": "x", "script": ANSWER, "tools": []}, format="json")
    assert response.status_code == 202
    body = response.json()
    assert (body["status"], body["outcome"]) == ("queued", "waiting_for_queue")
    assert "once the queue is back" in body["detail"] and "redis" not in body["detail"].lower()
    run = AgentRun.objects.get(pk=body["run_id"])
    assert (run.status, run.termination_reason) == (RunStatus.QUEUED, "")


def _rates(**rates: str) -> dict:
    config = copy.deepcopy(settings.REST_FRAMEWORK)
    config["DEFAULT_THROTTLE_RATES"].update(rates)
    return config


@pytest.mark.django_db
def test_creating_is_throttled_per_user_and_reading_is_not(alice, bob, api, client_for):
    with override_settings(REST_FRAMEWORK=_rates(run_create="2/min")):
        statuses = [
            api.post(LIST, {"prompt": "x", "script": ANSWER, "tools": []}, format="json").status_code for _ in range(3)
        ]
        throttled = api.post(LIST, {"prompt": "x"}, format="json")
        assert statuses == [202, 202, 429]
        assert "detail" in throttled.json() and int(throttled["Retry-After"]) > 0
        assert api.get(LIST).status_code == 200
        # Another user has their own allowance.
        assert (
            client_for(bob).post(LIST, {"prompt": "x", "script": ANSWER, "tools": []}, format="json").status_code == 202
        )
    assert AgentRun.objects.count() == 3
