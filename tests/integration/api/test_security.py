"""Issue 9: what the app refuses at its edges. Each test names the finding it guards; each
failed on the code before the fix (a 500, a traceback, an HTML page or a silent acceptance)."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.contrib.auth.models import Permission
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from nrllm_agents.domain.jsonlimits import MAX_JSON_DEPTH
from nrllm_agents.models import AgentRun, RunStatus

LIST = "/api/runs/"
TURN = {"tool_calls": [{"name": "calculator", "arguments": {"expression": "1+1"}}]}


def nested(depth: int, opener: str = "[", closer: str = "]", core: str = "1") -> str:
    return opener * depth + core + closer * depth


def post_json(api, path: str, raw: str | bytes):
    return api.generic("POST", path, raw, content_type="application/json")


# --- finding 2: deeply nested JSON is a 400, never a RecursionError --------------------------
@pytest.mark.django_db
@pytest.mark.parametrize("depth", [MAX_JSON_DEPTH + 1, 480, 1_000, 100_000])
def test_deep_json_bodies_are_400_on_every_api_endpoint(api, alice, make_run, depth):
    # Guards finding 2: ~480 levels crashed requests.py, ~1,000 DRF's parser (500 both).
    run = make_run(alice)
    bodies = {
        LIST: '{"prompt": "x", "script": ' + nested(depth, "[", "]", "{}") + "}",
        f"{LIST}{run.pk}/cancel/": '{"reason": ' + nested(depth) + "}",
        f"{LIST}{run.pk}/approve/": '{"approved": ' + nested(depth, '{"a": ', "}") + "}",
        f"{LIST}cancel/": '{"ids": ' + nested(depth) + "}",
    }
    for path, body in bodies.items():
        response = post_json(api, path, body)
        assert response.status_code == 400, (path, response.status_code)
        assert f"deeper than {MAX_JSON_DEPTH} levels" in response.json()["detail"]
    assert AgentRun.objects.count() == 1


@pytest.mark.django_db
def test_brackets_inside_strings_do_not_count_as_depth(api):
    response = post_json(
        api, LIST, json.dumps({"prompt": "[" * 5000 + "{" * 5000, "script": [{"content": "]"}], "mode": "sync"})
    )
    assert response.status_code == 201, response.json()


@pytest.mark.django_db
@hsettings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    depth=st.integers(min_value=0, max_value=300_000),
    width=st.integers(min_value=0, max_value=2_000),
    opener=st.sampled_from(["[", '{"k": ']),
    core=st.sampled_from(["1", '"x"', "null", "[]", ""]),
)
def test_fuzz_nesting_and_size_never_gives_a_server_error(api, depth, width, opener, core):
    # Guards findings 2 and 8: absurd nesting and sizes, balanced or not, get a 4xx JSON answer.
    closer = "]" if opener == "[" else "}"
    body = (
        '{"prompt": "x", "script": [' + ",".join([nested(depth, opener, closer, core)] * max(width // 1000, 1)) + "]}"
    )
    response = post_json(api, LIST, body)
    assert 400 <= response.status_code < 500, response.status_code
    assert "detail" in response.json() or response.status_code == 400


@pytest.mark.django_db
def test_deep_script_in_the_playground_is_a_form_error(alice):
    # Guards finding 2 in the playground's script field (was a 500).
    client = Client()
    client.force_login(alice)
    form = {
        "prompt": "x",
        "provider": "scripted",
        "tools": ["calculator"],
        "max_iterations": "5",
        "mode": "interactive",
        "script": nested(100_000),
    }
    response = client.post("/playground/runs/", form, headers={"Accept": "application/json"})
    assert response.status_code == 400
    assert response.json()["errors"]["script"] == [f"JSON nested deeper than {MAX_JSON_DEPTH} levels"]


@pytest.mark.django_db
def test_deep_script_on_the_command_line_is_a_usage_error():
    # Guards finding 2 in agent_run --script (was a traceback).
    with pytest.raises(CommandError) as raised:
        call_command("agent_run", "x", "--script", nested(100_000), stdout=StringIO(), stderr=StringIO())
    assert raised.value.returncode == 2 and "deeper than" in str(raised.value)
    assert not AgentRun.objects.exists()


# --- finding 8: limits on what a request may hold ---------------------------------------------
@pytest.mark.django_db
def test_a_script_longer_than_the_iteration_cap_allows_is_refused(api):
    # Guards finding 8: a 100,000-turn script was accepted though at most max_iterations+1 play.
    response = post_json(api, LIST, json.dumps({"prompt": "x", "max_iterations": 3, "script": [TURN] * 5}))
    assert response.status_code == 400
    assert response.json()["script"] == ["at most 4 turns (max_iterations + 1): later turns could never play"]
    big = [{"content": "y" * 100_000}] * 4
    response = post_json(api, LIST, json.dumps({"prompt": "x", "max_iterations": 3, "script": big}))
    assert response.status_code == 400 and "KiB" in response.json()["script"][0]
    assert not AgentRun.objects.exists()


@pytest.mark.django_db
def test_a_too_large_body_is_a_json_413(api, settings):
    # Guards finding 8: Django's HTML page (or no limit at all through DRF's stream) before.
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 10_000
    response = post_json(api, LIST, json.dumps({"prompt": "x" * 20_000}))
    assert response.status_code == 413
    assert response["Content-Type"] == "application/json"
    assert response.json()["detail"] == "The request body is larger than 10000 bytes."


@pytest.mark.django_db
def test_lists_leave_out_scripts_unless_expanded(api, alice):
    # Guards finding 8: ten 1.6 MB scripts made one user's run list 16 MB.
    response = post_json(api, LIST, json.dumps({"prompt": "x", "script": [{"content": "z" * 1000}]}))
    assert response.status_code == 202
    listed = api.get(LIST).json()["results"][0]
    assert "script" not in listed["request"] and listed["request"]["prompt"] == "x"
    expanded = api.get(LIST, {"expand": "request"}).json()["results"][0]
    assert expanded["request"]["script"] == [{"content": "z" * 1000}]
    assert api.get(f"{LIST}{listed['run_id']}/").json()["request"]["script"] == [{"content": "z" * 1000}]
    assert api.get(LIST, {"expand": "nonsense"}).status_code == 400


# --- finding 7: NUL never reaches a view, a filter or the database ----------------------------
@pytest.mark.django_db
def test_nul_is_refused_at_the_edge_everywhere(alice, django_user_model, runtime):
    # Guards finding 7: a NUL cancel reason in the playground and ?status__exact=%00 in the
    # admin were 500s (PostgreSQL refuses the byte).
    run = AgentRun.objects.get(pk=runtime.enqueue({"prompt": "x", "script": [{"content": "y"}]}, owner=alice))
    client = Client()
    client.force_login(alice)
    response = client.post(f"/playground/runs/{run.pk}/cancel/", {"reason": "a\x00b"})
    assert response.status_code == 400 and b"NUL" in response.content
    response = client.post(
        f"/playground/runs/{run.pk}/cancel/", {"reason": "a\x00b"}, headers={"Accept": "application/json"}
    )
    assert response.status_code == 400 and "NUL" in response.json()["detail"]
    assert AgentRun.objects.get(pk=run.pk).status == RunStatus.QUEUED

    admin = Client()
    admin.force_login(django_user_model.objects.create_superuser("root", "r@example.com", "pw"))
    for url in (
        "/admin/nrllm_agents/agentrun/?status__exact=%00",
        "/admin/nrllm_agents/agentrun/?q=%00",
        "/admin/nrllm_agents/agentrun/%00/change/",
        "/api/runs/?status=%00",
        "/playground/?x=%00",
    ):
        response = admin.get(url)
        assert response.status_code == 400, url


# --- finding 10 -------------------------------------------------------------------------------
@pytest.mark.django_db
@pytest.mark.parametrize("age", ["999999d", "999999999w"])
def test_an_absurd_older_than_is_a_usage_error(age):
    # Guards finding 10: an OverflowError and exit 1 before.
    with pytest.raises(CommandError) as raised:
        call_command("agent_cancel", "--status", "queued", "--older-than", age, stdout=StringIO())
    assert raised.value.returncode == 2 and "too long ago" in str(raised.value)


# --- finding 11 -------------------------------------------------------------------------------
@pytest.mark.django_db
@pytest.mark.parametrize("after", ["1_0", " 5 ", "\u0665", str(2**31), "-2", "x", ""])
def test_the_stream_takes_exactly_the_after_values_the_events_endpoint_takes(api, alice, make_run, after):
    # Guards finding 11: the stream parsed with int(), which takes "1_0", " 5 " and "٥".
    run = make_run(alice, RunStatus.COMPLETED)
    events = api.get(f"{LIST}{run.pk}/events/", {"after": after})
    stream = api.get(f"{LIST}{run.pk}/stream/", {"after": after})
    if stream.status_code == 200:
        b"".join(stream.streaming_content)
    assert (events.status_code == 200) == (stream.status_code == 200), (events.status_code, stream.status_code)


@pytest.mark.django_db
def test_cancel_and_approve_reject_unknown_fields_like_create(api, alice, make_run):
    # Guards finding 11: {"reasn": "..."} was silently ignored by cancel.
    run = make_run(alice)
    response = post_json(api, f"{LIST}{run.pk}/cancel/", json.dumps({"reasn": "typo"}))
    assert response.status_code == 400
    assert response.json() == {"non_field_errors": ["unknown fields: reasn"]}
    response = post_json(api, f"{LIST}{run.pk}/approve/", json.dumps({"approved": True, "queue": True}))
    assert response.status_code == 400 and response.json() == {"non_field_errors": ["unknown fields: queue"]}
    assert AgentRun.objects.get(pk=run.pk).status == RunStatus.QUEUED


@pytest.mark.django_db
@pytest.mark.parametrize("path", ["/api/schema/", "/api/docs/"])
def test_anonymous_schema_and_docs_are_401(path):
    # Guards finding 11: 403 where 401 is meant (no challenge for the client to answer).
    response = Client().get(path)
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == "Token"


# --- finding 3 via the API, with the approve permission --------------------------------------
@pytest.mark.django_db
def test_staff_approve_anothers_run_only_with_the_approve_permission(alice, staff, client_for, make_run):
    # Guards finding 3: approving someone else's gated write_note executed it.
    run = make_run(alice, RunStatus.WAITING_FOR_APPROVAL)
    body = json.dumps({"approved": True})
    assert post_json(client_for(staff), f"{LIST}{run.pk}/approve/", body).status_code == 403
    assert AgentRun.objects.get(pk=run.pk).status == RunStatus.WAITING_FOR_APPROVAL
    staff.user_permissions.add(Permission.objects.get(codename="approve_agentrun"))
    staff = type(staff).objects.get(pk=staff.pk)
    response = post_json(client_for(staff), f"{LIST}{run.pk}/approve/", body)
    assert response.status_code == 200 and response.json()["status"] == RunStatus.COMPLETED
