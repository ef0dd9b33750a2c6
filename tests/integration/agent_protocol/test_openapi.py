"""``/lg/openapi.json``: a valid OpenAPI 3.1 document that names every route of the protocol,
and the contract check the end-to-end tests run against it refuses what it does not describe."""

from __future__ import annotations

import re

import pytest
from drf_spectacular.validation import validate_schema
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from nrllm_agents.agent_protocol import urls
from tests.e2e.agent_protocol.contract import Exchange, problems


@pytest.fixture
def document(db, django_user_model):
    client = APIClient()
    client.credentials(HTTP_X_API_KEY=Token.objects.create(user=django_user_model.objects.create_user("d")).key)
    response = client.get("/lg/openapi.json")
    assert response.status_code == 200
    return response.json()


def test_the_document_is_valid_openapi_and_covers_every_route(document):
    validate_schema(document)
    assert document["servers"] == [{"url": "/lg"}]
    routes = {"/" + re.sub(r"<str:(\w+)>", r"{\1}", str(p.pattern)) for p in urls.urlpatterns} - {"/openapi.json"}
    assert routes == set(document["paths"])


def test_the_contract_refuses_what_the_document_does_not_describe(document):
    run = {
        "run_id": "7c9e6679-7425-40de-944b-e07fc1f90ae7",
        "thread_id": "7c9e6679-7425-40de-944b-e07fc1f90ae7",
        "assistant_id": "helper",
        "created_at": "2026-01-01T00:00:00+00:00",
        "updated_at": "2026-01-01T00:00:00+00:00",
        "status": "success",
        "metadata": {},
        "multitask_strategy": "reject",
    }
    path = "/threads/t/runs/r"
    assert problems(document, [Exchange("GET", path, None, 200, run)]) == []
    assert problems(document, [Exchange("GET", path, None, 200, {**run, "status": "completed"})])
    assert problems(document, [Exchange("GET", path, None, 500, None)])
    assert problems(document, [Exchange("PUT", path, None, 200, run)])
    assert problems(document, [Exchange("POST", "/threads/t/runs", {"assistant_id": 3}, 200, run)])


def test_the_document_needs_credentials(db):
    assert APIClient().get("/lg/openapi.json").status_code == 401
