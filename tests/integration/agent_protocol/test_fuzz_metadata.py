"""A fuzz of the Agent Protocol's bodies and metadata (issue 44): thread create, patch and
search, and run create, with Hypothesis's JSON values as whole bodies and as metadata (big,
deep, odd keys). Every answer is a 2xx, or a 4xx whose JSON body has a ``detail``; never a 5xx,
and no thread keeps metadata past the cap."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hs

from nrllm_agents import admission
from nrllm_agents.catalog import agents as catalog
from nrllm_agents.domain.jsonlimits import value_too_large
from nrllm_agents.models import Agent, AgentRun, Thread
from tests.integration.agent_protocol.test_bad_input import JSON, api, check  # noqa: F401  (fixture)

BIG = hs.integers(min_value=0, max_value=400_000).map(lambda n: "x" * n)
METADATA = hs.dictionaries(hs.text(max_size=8), JSON | BIG, max_size=4) | JSON
ENDPOINTS = ("create", "patch", "search", "run", "run_stateless")


def send(client, thread_id: str, which: str, body: object):
    raw = json.dumps(body)
    if which == "patch":
        return client.generic("PATCH", f"/lg/threads/{thread_id}", raw, content_type="application/json")
    path = {
        "create": "/lg/threads",
        "search": "/lg/threads/search",
        "run": f"/lg/threads/{thread_id}/runs",
        "run_stateless": "/lg/runs",
    }[which]
    return client.generic("POST", path, raw, content_type="application/json")


@pytest.mark.django_db
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(metadata=METADATA, body=JSON, which=hs.sampled_from(ENDPOINTS))
def test_lg_bodies_and_metadata_are_2xx_or_a_clear_4xx(api, metadata, body, which):  # noqa: F811
    client, thread_id = api
    if not Agent.objects.filter(name="helper").exists():  # run create reads the body past the assistant
        catalog.save("helper", {"provider": "scripted", "script": [{"content": "hi"}], "tools": []}, description="h")
    admission.reset()  # 80 examples spend more than a minute's creates
    check(send(client, thread_id, which, body), refused=False)
    with_metadata = {"metadata": metadata, **({"assistant_id": "helper"} if which.startswith("run") else {})}
    response = send(client, thread_id, which, with_metadata)
    check(response, refused=which.startswith("run"))  # no input: no run starts
    assert response.status_code in (200, 404, 409, 413, 422), response.status_code
    for kept in Thread.objects.values_list("metadata", flat=True):
        assert not value_too_large(kept)
    assert not AgentRun.objects.exists()
