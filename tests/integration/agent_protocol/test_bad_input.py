"""Bad input through the Agent Protocol is a 4xx with a JSON ``detail``, never a 500.

A small fuzz: hand-written bodies and query strings, then Hypothesis's JSON values, sent to
every endpoint that reads a body. No saved agent exists, so no body can start a run.
"""

from __future__ import annotations

import json
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hs
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from nrllm_agents.runtime import threads

BODIES = [
    None,
    [],
    "text",
    1,
    {"assistant_id": 5},
    {"assistant_id": ""},
    {"assistant_id": "nobody", "input": {"messages": [{"role": "user", "content": "hi"}]}},
    {"assistant_id": "nobody", "command": {"resume": True}},
    {"input": {"messages": "no"}},
    {"limit": "many", "offset": -1},
    {"limit": 10**12},
    {"metadata": "not an object"},
    {"metadata": {"k": "\u0000"}},
    {"thread_id": "not a uuid"},
    {"if_exists": "sometimes"},
    {"ids": ["x", 1]},
    {"stream_mode": ["nonsense"]},
    {"multitask_strategy": "maybe"},
]
JSON = hs.recursive(
    hs.none() | hs.booleans() | hs.integers() | hs.floats(allow_nan=False) | hs.text(max_size=20),
    lambda inner: hs.lists(inner, max_size=4) | hs.dictionaries(hs.text(max_size=12), inner, max_size=4),
    max_leaves=12,
)


@pytest.fixture
def api(db, django_user_model):
    user = django_user_model.objects.create_user(username="mallory")
    client = APIClient()
    client.credentials(HTTP_X_API_KEY=Token.objects.create(user=user).key)
    thread = threads.create(owner=user)
    return client, str(thread.pk)


def paths(thread_id: str) -> list[str]:
    run = f"/lg/threads/{thread_id}/runs/{uuid.uuid4()}"
    return [
        "/lg/threads",
        "/lg/threads/search",
        "/lg/assistants/search",
        f"/lg/threads/{thread_id}/runs",
        f"/lg/threads/{thread_id}/runs/stream",
        f"/lg/threads/{thread_id}/runs/wait",
        f"/lg/threads/{thread_id}/history",
        "/lg/runs",
        "/lg/runs/wait",
        f"{run}/cancel",
    ]


def check(response, *, refused: bool = True) -> None:
    """Never a 500; a refusal is a 4xx whose JSON body has a ``detail`` (``refused``: must be one)."""
    assert response.status_code < 500, (response.status_code, response.content[:300])
    if refused:
        assert response.status_code >= 400, (response.status_code, response.content[:300])
    if response.status_code >= 400:
        body = json.loads(response.content)
        assert isinstance(body, dict) and isinstance(body.get("detail"), str), body


def test_hand_written_bad_bodies_are_4xx_json(api):
    client, thread_id = api
    for path in paths(thread_id):
        for body in BODIES:  # some are harmless to some endpoints (an empty create): never a 500
            check(client.post(path, json.dumps(body), content_type="application/json"), refused=False)
        for body in BODIES[1:]:
            if "/runs" in path and "cancel" not in path:  # no body of these starts a run
                check(client.post(path, json.dumps(body), content_type="application/json"))
        check(client.post(path, "{not json", content_type="application/json"))
        check(client.post(path, "[" * 5000, content_type="application/json"))
    check(client.patch(f"/lg/threads/{thread_id}", json.dumps({"metadata": 3}), content_type="application/json"))
    check(client.get(f"/lg/threads/{thread_id}/runs", {"limit": "x"}))
    check(client.get(f"/lg/threads/{thread_id}/runs", {"status": "sleepy"}))
    check(client.get("/lg/threads/nope"))
    check(client.get(f"/lg/threads/{thread_id}/runs/nope"))
    check(client.get(f"/lg/threads/{thread_id}/runs/{uuid.uuid4()}/stream", HTTP_LAST_EVENT_ID="x"))
    check(client.get("/lg/assistants/nobody"))


def test_a_caller_without_credentials_is_401_json(db):
    response = APIClient().post("/lg/threads", "{}", content_type="application/json")
    assert response.status_code == 401 and "detail" in response.json()
    wrong = APIClient()
    wrong.credentials(HTTP_X_API_KEY="not-a-token")
    assert wrong.post("/lg/threads/search", "{}", content_type="application/json").status_code == 401


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=JSON, which=hs.integers(min_value=0, max_value=9))
def test_any_json_body_is_never_a_500(api, body, which):
    client, thread_id = api
    path = paths(thread_id)[which]
    check(client.post(path, json.dumps(body), content_type="application/json"), refused=False)
