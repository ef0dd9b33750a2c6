"""Agents: named, versioned definitions; a run records the exact version it started from, and
editing (or deleting) the agent later leaves that record as it was."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.contrib.auth.models import Permission
from django.core.management import call_command
from rest_framework.test import APIClient

from nrllm_agents.catalog import agents
from nrllm_agents.models import Agent, AgentRun, AgentRunEvent, AgentVersion
from nrllm_agents.presentation.outcomes import Outcome
from nrllm_agents.validation.run_request import InvalidRequest, RunRequest

pytestmark = pytest.mark.django_db

V1 = {"system": "You add numbers.", "provider": "scripted", "tools": ["calculator"], "max_iterations": 3}
V2 = {"system": "You tell the time.", "provider": "scripted", "tools": ["current_time"], "max_total_tokens": 500}
ANSWER = [{"content": "done"}]


@pytest.fixture
def editor(django_user_model):
    """Staff holding the agent permissions (add, change, delete)."""
    user = django_user_model.objects.create_user("editor", password="pw", is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(codename__endswith="_agent"))
    return user


def api(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def row(run_id) -> dict:
    """A run's row and stream, serialised: compared byte for byte before and after an edit."""
    return json.loads(
        json.dumps(
            {
                "run": AgentRun.objects.filter(pk=run_id).values().get(),
                "events": list(AgentRunEvent.objects.filter(run_id=run_id).order_by("sequence").values("payload")),
            },
            default=str,
        )
    )


def test_the_api_keeps_versions_and_a_run_records_the_one_it_used(editor, alice):
    created = api(editor).post("/api/agents/", {"name": "adder", "definition": V1}, format="json")
    assert created.status_code == 201, created.json()
    assert created.json()["version"] == 1 and created.json()["definition"] == V1

    ran = api(alice).post(
        "/api/runs/", {"prompt": "1+1?", "agent": "adder", "mode": "sync", "script": ANSWER}, format="json"
    )
    assert ran.status_code == 201, ran.json()
    body = ran.json()
    assert body["agent"] == {"name": "adder", "version": 1}
    assert body["request"]["tools"] == ["calculator"] and body["request"]["max_iterations"] == 3
    run = AgentRun.objects.get(pk=body["run_id"])
    assert run.agent_version == AgentVersion.objects.get(agent__name="adder", version=1)
    assert run.agent_snapshot == {"name": "adder", "version": 1, "definition": V1}
    sent = AgentRunEvent.objects.get(run=run, kind="request").payload["messages"]
    assert sent[0] == {"role": "system", "content": "You add numbers."}
    before = row(run.pk)

    edited = api(editor).put("/api/agents/adder/", {"definition": V2}, format="json")
    assert edited.status_code == 200 and edited.json()["version"] == 2
    assert [v["version"] for v in edited.json()["versions"]] == [2, 1]
    assert row(run.pk) == before  # the edit left the run's record as it was
    assert api(alice).get(f"/api/runs/{run.pk}/").json()["agent"] == {"name": "adder", "version": 1}

    again = api(alice).post(
        "/api/runs/", {"prompt": "time?", "agent": "adder", "mode": "sync", "script": ANSWER}, format="json"
    )
    second = AgentRun.objects.get(pk=again.json()["run_id"])
    assert (second.agent_snapshot["version"], second.tools, second.max_total_tokens) == (2, ["current_time"], 500)
    pinned = api(alice).post(
        "/api/runs/",
        {"prompt": "p", "agent": "adder", "agent_version": 1, "mode": "sync", "script": ANSWER},
        format="json",
    )
    assert AgentRun.objects.get(pk=pinned.json()["run_id"]).tools == ["calculator"]

    same = api(editor).put("/api/agents/adder/", {"definition": V2}, format="json")
    assert same.json()["version"] == 2  # the same definition adds no version

    Agent.objects.filter(name="adder").delete()
    assert row(run.pk)["run"]["agent_snapshot"] == before["run"]["agent_snapshot"]
    assert AgentRun.objects.get(pk=run.pk).agent_version_id is None
    assert RunRequest.from_row(AgentRun.objects.get(pk=run.pk)).tools == ("calculator",)  # still resumable


def test_who_may_read_and_change_agents(editor, alice, client):
    agents.save("adder", V1, by=editor)
    assert api(alice).get("/api/agents/").status_code == 200
    assert api(alice).get("/api/agents/adder/").json()["versions"][0]["created_by"] == "editor"
    assert api(alice).post("/api/agents/", {"name": "x", "definition": V1}, format="json").status_code == 403
    assert api(alice).put("/api/agents/adder/", {"definition": V2}, format="json").status_code == 403
    assert api(alice).delete("/api/agents/adder/").status_code == 403
    assert client.get("/api/agents/").status_code == 401
    assert api(editor).get("/api/agents/missing/").status_code == 404
    assert AgentVersion.objects.count() == 1


def test_a_bad_definition_is_refused_naming_the_field_and_saves_nothing(editor):
    for definition, field in (
        ({"tools": ["no_such_tool"]}, "definition.tools"),
        ({"max_cost": "-1"}, "definition.max_cost"),
        ({"connection": "nope"}, "definition.connection"),
        ({"prompt": "not a definition field"}, "definition"),
    ):
        refused = api(editor).post("/api/agents/", {"name": "bad", "definition": definition}, format="json")
        assert refused.status_code == 400 and field in refused.json(), refused.json()
    assert api(editor).post("/api/agents/", {"name": "not a slug", "definition": V1}, format="json").status_code == 400
    assert not Agent.objects.exists()
    with pytest.raises(InvalidRequest) as unknown:
        RunRequest.from_mapping({"prompt": "p", "agent": "nobody"})
    assert "agent" in unknown.value.errors


def test_a_queued_run_is_rehydrated_with_the_version_it_was_queued_with():
    agents.save("adder", V1)
    queued = RunRequest.from_mapping({"prompt": "p", "agent": "adder"})
    agents.save("adder", V2)  # edited before a worker claims it
    assert RunRequest.from_mapping(queued.as_dict()) == queued
    assert queued.agent_version == 1 and queued.tools == ("calculator",) and queued.system == "You add numbers."


def test_agent_run_and_agent_fork_start_from_an_agent(runtime):
    agents.save("adder", V1)
    out = StringIO()
    call_command("agent_run", "1+1?", "--agent", "adder", "--script", json.dumps(ANSWER), "--json", stdout=out)
    final = json.loads(out.getvalue().splitlines()[-1])
    assert final["agent"] == {"name": "adder", "version": 1}
    parent = AgentRun.objects.get(pk=final["run_id"])
    assert parent.tools == ["calculator"] and parent.options["max_iterations"] == 3

    agents.save("timer", V2)
    fork = runtime.fork(parent.pk, overrides={"agent": "timer", "script": ANSWER}, queued=False)
    assert fork.outcome == Outcome.COMPLETED, fork.error
    child = AgentRun.objects.get(pk=fork.run_id)
    assert child.agent_snapshot["name"] == "timer" and child.tools == ["current_time"]
    assert child.max_total_tokens == 500
    plain = runtime.fork(parent.pk, overrides={"script": ANSWER}, queued=False)
    assert AgentRun.objects.get(pk=plain.run_id).agent_snapshot["name"] == "adder"  # the parent's version


def test_the_admin_adds_a_version_on_each_edit(admin_client):
    created = admin_client.post(
        "/admin/nrllm_agents/agent/add/",
        {"name": "adder", "description": "", "definition": json.dumps(V1), **_inline()},
    )
    assert created.status_code == 302, created.content.decode()[:2000]
    agent = Agent.objects.get(name="adder")
    changed = admin_client.post(
        f"/admin/nrllm_agents/agent/{agent.pk}/change/",
        {"description": "d", "definition": json.dumps(V2), **_inline(1)},
    )
    assert changed.status_code == 302, changed.content.decode()[:2000]
    assert list(agent.versions.order_by("version").values_list("definition", flat=True)) == [V1, V2]
    page = admin_client.get(f"/admin/nrllm_agents/agent/{agent.pk}/change/").content.decode()
    assert "You tell the time." in page
    refused = admin_client.post(
        f"/admin/nrllm_agents/agent/{agent.pk}/change/",
        {"description": "d", "definition": json.dumps({"tools": ["nope"]}), **_inline(2)},
    )
    assert refused.status_code == 200 and "unknown tools" in refused.content.decode()
    assert agent.versions.count() == 2


def _inline(count: int = 0) -> dict[str, str]:
    prefix = "versions"
    return {
        f"{prefix}-TOTAL_FORMS": str(count),
        f"{prefix}-INITIAL_FORMS": str(count),
        f"{prefix}-MIN_NUM_FORMS": "0",
        f"{prefix}-MAX_NUM_FORMS": "1000",
    }


def test_an_agent_on_the_scripted_provider_is_refused_in_production(editor, admin_client, settings):
    """The scripted provider is a test double: production refuses to run it, so it refuses to
    save an agent on it too (the API with a 400 naming the field, the admin with a form error)."""
    settings.NRLLM_AGENTS = {**getattr(settings, "NRLLM_AGENTS", {}), "ALLOW_SCRIPTED": False}
    refused = api(editor).post("/api/agents/", {"name": "fake", "definition": V1}, format="json")
    assert refused.status_code == 400
    assert "test double" in refused.json()["definition.provider"][0]
    page = admin_client.post(
        "/admin/nrllm_agents/agent/add/", {"name": "fake", "description": "", "definition": json.dumps(V1), **_inline()}
    )
    assert page.status_code == 200 and "scripted provider is a test double" in page.content.decode()
    assert not Agent.objects.exists()
    settings.NRLLM_AGENTS = {**settings.NRLLM_AGENTS, "ALLOW_SCRIPTED": True}  # an operator opened it
    assert api(editor).post("/api/agents/", {"name": "fake", "definition": V1}, format="json").status_code == 201
