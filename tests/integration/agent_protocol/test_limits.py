"""The Agent Protocol's threads under the limits of the API (issue 44, items 5 and 8).

- ``POST /lg/threads`` spends the threads' create rate, the same count as ``/api/threads/``.
  Before: 150 of 150 parallel creates passed where ``/api/threads/`` passed 120.
- Metadata (a thread's, a run's) holds at most ``jsonlimits.MAX_VALUE_BYTES``, and a PATCH's
  merged result is checked too: 422 with a JSON ``detail``. Before: six PATCHes of 2 MB made
  one 12 MB thread that every read returned.
- An oversized body is the JSON 413, logged as one warning line, whatever its type. Before: a
  3 MB form body got Django's HTML 400 and an ERROR with a traceback.
"""

from __future__ import annotations

import copy
import json
import logging

import pytest
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from nrllm_agents import admission
from nrllm_agents.catalog import agents as catalog
from nrllm_agents.domain.jsonlimits import MAX_VALUE_BYTES
from nrllm_agents.models import AgentRun, Thread

pytestmark = pytest.mark.django_db


@pytest.fixture
def client(alice) -> APIClient:
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=alice).key}")  # both surfaces take it
    return api


def post(client: APIClient, path: str, body: object, method: str = "POST"):
    return client.generic(method, path, json.dumps(body), content_type="application/json")


def test_lg_thread_creation_spends_the_rate_of_api_threads(client, settings):
    rest = copy.deepcopy(settings.REST_FRAMEWORK)
    rest["DEFAULT_THROTTLE_RATES"]["run_create"] = "3/day"
    settings.REST_FRAMEWORK = rest
    admission.reset()
    assert client.post("/api/threads/", {}, format="json").status_code == 201
    assert post(client, "/lg/threads", {}).status_code == 200
    assert post(client, "/lg/threads", {}).status_code == 200
    refused = post(client, "/lg/threads", {})
    assert refused.status_code == 429 and "Retry-After" in refused
    assert isinstance(refused.json()["detail"], str)
    assert client.post("/api/threads/", {}, format="json").status_code == 429  # one count for both
    assert Thread.objects.count() == 3


def test_metadata_past_the_cap_is_a_422_and_a_patch_s_merge_is_checked(client):
    half = {"a": "x" * (MAX_VALUE_BYTES // 2)}
    too_much = {"a": "x" * MAX_VALUE_BYTES}
    refused = post(client, "/lg/threads", {"metadata": too_much})
    assert refused.status_code == 422 and refused.json()["detail"] == "metadata: at most 256 KiB of JSON"
    assert not Thread.objects.exists()
    thread = post(client, "/lg/threads", {"metadata": half}).json()["thread_id"]
    assert post(client, f"/lg/threads/{thread}", {"metadata": {"b": 1}}, "PATCH").status_code == 200
    merged = post(client, f"/lg/threads/{thread}", {"metadata": {"c": half["a"]}}, "PATCH")
    assert merged.status_code == 422 and "256 KiB" in merged.json()["detail"]
    assert Thread.objects.get(pk=thread).metadata == {**half, "b": 1}  # nothing of the refused merge kept
    replaced = post(client, f"/lg/threads/{thread}", {"metadata": {"a": "short"}}, "PATCH")
    assert replaced.status_code == 200 and replaced.json()["metadata"] == {"a": "short", "b": 1}
    catalog.save("helper", {"provider": "scripted", "script": [{"content": "hi"}], "tools": []}, description="h")
    start = {"assistant_id": "helper", "input": {"messages": [{"role": "user", "content": "hi"}]}}
    run = post(client, f"/lg/threads/{thread}/runs", {**start, "metadata": too_much})
    assert run.status_code == 422 and run.json()["detail"] == "metadata: at most 256 KiB of JSON"
    assert not AgentRun.objects.exists()


@pytest.mark.parametrize("content_type", ["application/json", "application/x-www-form-urlencoded"])
@pytest.mark.parametrize("path", ["/lg/threads", "/lg/threads/search", "/api/threads/"])
def test_an_oversized_body_is_the_json_413_and_one_warning(client, settings, caplog, content_type, path):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 10_000
    body = "metadata=" + "x" * 20_000 if "form" in content_type else json.dumps({"metadata": {"a": "x" * 20_000}})
    with caplog.at_level(logging.INFO):
        response = client.generic("POST", path, body, content_type=content_type)
    assert response.status_code == 413 and response["Content-Type"] == "application/json"
    assert response.json() == {"detail": "The request body is larger than 10000 bytes."}
    assert [r.levelname for r in caplog.records if r.levelno >= logging.WARNING] == ["WARNING"]
    logged = next(r for r in caplog.records if r.levelno >= logging.WARNING)
    assert logged.exc_info is None and "\n" not in logged.getMessage() and "413" in logged.getMessage()


def test_an_oversized_form_to_a_page_is_a_413_not_an_error(client, settings, caplog):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 10_000
    with caplog.at_level(logging.INFO):
        response = APIClient().post(
            "/accounts/login/", "username=" + "x" * 20_000, content_type="application/x-www-form-urlencoded"
        )
    assert response.status_code == 413
    assert [r.levelname for r in caplog.records if r.levelno >= logging.WARNING] == ["WARNING"]
