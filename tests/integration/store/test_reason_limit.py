"""One limit on a cancel reason, enforced where it enters the store, with the same words everywhere.

Guards what once was: the limit was 2000, 1000, 1000 and 500 characters on the API, the admin,
the CLI and the playground, and the playground silently cut a long reason short.
"""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.test import Client
from rest_framework.test import APIClient

from nrllm_agents import store
from nrllm_agents.models import AgentRun, CancelSource, RunStatus
from nrllm_agents.validation.run_request import RunRequest

pytestmark = pytest.mark.django_db

TOO_LONG = "x" * (store.MAX_REASON_CHARS + 1)
PROBLEM = f"the reason is longer than {store.MAX_REASON_CHARS} characters ({store.MAX_REASON_CHARS + 1})"


def queued(owner) -> AgentRun:
    request = RunRequest.from_mapping({"prompt": "p", "script": [{"content": "x"}]})
    return store.create_queued({**request.row_fields(), "owner": owner}, request.as_dict())


@pytest.mark.parametrize("reason, problem", [(TOO_LONG, PROBLEM), ("a\x00b", "the reason contains a NUL character")])
def test_the_store_refuses_what_it_cannot_record_and_changes_nothing(alice, reason, problem):
    run = queued(alice)
    with pytest.raises(store.InvalidArgument, match=problem.replace("(", r"\(").replace(")", r"\)")):
        store.cancel(run.pk, source=CancelSource.API, reason=reason)
    with pytest.raises(store.InvalidArgument):
        store.cancel_many(AgentRun.objects.filter(pk=run.pk), source=CancelSource.API, reason=reason)
    assert AgentRun.objects.get(pk=run.pk).status == RunStatus.QUEUED
    assert store.cancel(run.pk, source=CancelSource.API, reason="x" * store.MAX_REASON_CHARS).applied


def test_every_surface_refuses_one_character_too_many_with_the_same_limit(alice, django_user_model):
    run = queued(alice)
    api = APIClient()
    api.force_authenticate(alice)
    response = api.post(f"/api/runs/{run.pk}/cancel/", {"reason": TOO_LONG}, format="json")
    assert response.status_code == 400 and str(store.MAX_REASON_CHARS) in str(response.json()["reason"])

    web = Client()
    web.force_login(alice)
    response = web.post(
        f"/playground/runs/{run.pk}/cancel/", {"reason": TOO_LONG}, headers={"Accept": "application/json"}
    )
    assert response.status_code == 400 and PROBLEM in response.json()["message"]  # refused, not cut short

    with pytest.raises(CommandError, match=r"--reason: the reason is longer than 1000 characters") as info:
        call_command("agent_cancel", str(run.pk), "--reason", TOO_LONG, stdout=StringIO(), stderr=StringIO())
    assert info.value.returncode == 2

    admin = Client()
    admin.force_login(django_user_model.objects.create_superuser("op", "op@example.com", "pw"))
    response = admin.post(f"/admin/nrllm_agents/agentrun/{run.pk}/cancel/", {"post": "yes", "reason": TOO_LONG})
    assert response.status_code == 200 and str(store.MAX_REASON_CHARS) in response.content.decode()

    assert AgentRun.objects.get(pk=run.pk).status == RunStatus.QUEUED  # nothing was cancelled
