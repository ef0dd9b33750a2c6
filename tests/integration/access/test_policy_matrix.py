"""The permission matrix: actors × actions × surfaces, one answer everywhere (issues 9 and 13).

Guards issue 9 finding 3 (staff without the dedicated permissions acted on anyone's runs through
the API and the playground) and issue 13 (two ``visible_runs`` copies that disagreed): every
surface must give the answer of ``nrllm_agents.access.policy``, and that answer must be the table
below. Each action is tried on a run where an allowed caller changes nothing (a finished run
answers 409 to cancel and approve; bulk cancel is a dry run; start is sent an empty form), so
the matrix is walked on one set of rows.
"""

from __future__ import annotations

import io
import json
import uuid

import pytest
from django.contrib.auth.models import AnonymousUser, Permission
from django.test import Client

from nrllm_agents.access import policy
from nrllm_agents.models import AgentRun, RunStatus, Thread

A = policy.Action
ALL_ON_OWN = {A.SEE, A.STREAM, A.CANCEL, A.APPROVE, A.BULK_CANCEL, A.START}

# What each actor may do to alice's run. Written out, not derived: the policy must match it.
EXPECTED: dict[str, set[policy.Action]] = {
    "anonymous": set(),
    "owner": ALL_ON_OWN,
    "other_user": {A.START},
    "staff": {A.SEE, A.STREAM, A.START},
    "staff_cancel": {A.SEE, A.STREAM, A.START, A.CANCEL, A.BULK_CANCEL},
    "staff_approve": {A.SEE, A.STREAM, A.START, A.APPROVE},
    "superuser": ALL_ON_OWN,
    "user_with_both_perms": {A.START},  # not staff: does not see others' runs, so acts on none
}

SURFACES = {
    A.SEE: ("api", "playground", "admin"),
    A.STREAM: ("stream",),
    A.CANCEL: ("api", "playground", "admin"),
    A.APPROVE: ("api", "playground", "resolve", "admin"),  # resolve: the decision on a call in doubt
    A.BULK_CANCEL: ("api", "admin"),
    A.START: ("api", "playground"),
}
JSON = {"Accept": "application/json"}


@pytest.fixture
def actors(django_user_model, alice):
    def user(name: str, *, staff: bool = False, perms: tuple[str, ...] = ()):
        u = django_user_model.objects.create_user(name, is_staff=staff)
        u.user_permissions.add(*Permission.objects.filter(codename__in=perms))
        return django_user_model.objects.get(pk=u.pk)

    return {
        "anonymous": AnonymousUser(),
        "owner": alice,
        "other_user": user("mallory"),
        "staff": user("staff", staff=True),
        "staff_cancel": user("canceller", staff=True, perms=("cancel_agentrun",)),
        "staff_approve": user("approver", staff=True, perms=("approve_agentrun",)),
        "superuser": django_user_model.objects.create_superuser("root", "root@example.com", "pw"),
        "user_with_both_perms": user("perms", perms=("cancel_agentrun", "approve_agentrun")),
    }


def _client(user) -> Client:
    client = Client()
    if user.is_authenticated:
        client.force_login(user)
    return client


def _allowed(surface: str, response) -> bool:
    code = response.status_code
    if surface in ("api", "playground", "resolve", "stream"):
        assert code in (200, 201, 202, 400, 409, 401, 403, 404, 302), (surface, code)
        return code in (200, 201, 202, 400, 409)
    assert code in (200, 302, 403), (surface, code)
    return code == 200


def attempt(surface: str, action: policy.Action, user, finished: AgentRun, queued: AgentRun) -> bool:
    """Try ``action`` through ``surface`` as ``user``; True when the surface let it through."""
    c, fid = _client(user), finished.pk
    admin_run = f"/admin/nrllm_agents/agentrun/{fid}/"
    requests = {
        ("api", A.SEE): lambda: c.get(f"/api/runs/{fid}/"),
        ("playground", A.SEE): lambda: c.get(f"/playground/runs/{fid}/", headers=JSON),
        ("admin", A.SEE): lambda: c.get(f"{admin_run}change/"),
        ("stream", A.STREAM): lambda: c.get(f"/api/runs/{fid}/stream/"),
        ("api", A.CANCEL): lambda: c.post(f"/api/runs/{fid}/cancel/", {}, content_type="application/json"),
        ("playground", A.CANCEL): lambda: c.post(f"/playground/runs/{fid}/cancel/", headers=JSON),
        ("admin", A.CANCEL): lambda: c.get(f"{admin_run}cancel/"),
        ("api", A.APPROVE): lambda: c.post(
            f"/api/runs/{fid}/approve/", {"approved": True}, content_type="application/json"
        ),
        ("playground", A.APPROVE): lambda: c.post(
            f"/playground/runs/{fid}/approve/", {"decision": "approve"}, headers=JSON
        ),
        ("resolve", A.APPROVE): lambda: c.post(
            f"/playground/runs/{fid}/resolve/", {"decision": "not_happened"}, headers=JSON
        ),
        ("api", A.START): lambda: c.post("/api/runs/", {}, content_type="application/json"),
        ("playground", A.START): lambda: c.post("/playground/runs/", {}, headers=JSON),
    }
    if (surface, action) == ("api", A.BULK_CANCEL):
        response = c.post(
            "/api/runs/cancel/", {"ids": [str(queued.pk)], "dry_run": True}, content_type="application/json"
        )
        return response.status_code == 200 and response.json()["matched"] == 1
    if (surface, action) == ("admin", A.BULK_CANCEL):
        response = c.post(
            "/admin/nrllm_agents/agentrun/",
            {"action": "cancel_selected", "_selected_action": [str(queued.pk)], "select_across": "0"},
        )
        return response.status_code == 200 and bool(response.context["actionable"])
    if (surface, action) == ("admin", A.APPROVE):  # a run's page decides on a call in doubt
        response = c.post(f"{admin_run}resolve/", {"decision": "not_happened"})
        assert response.status_code in (302, 403), response.status_code
        return response.status_code == 302 and response["Location"] == f"{admin_run}change/"
    response = requests[(surface, action)]()
    if getattr(response, "streaming", False):
        b"".join(response.streaming_content)  # the run is finished: the stream ends at once
    return _allowed(surface, response)


@pytest.mark.django_db
def test_every_surface_gives_the_policys_answer_and_the_policy_is_the_table(actors, alice):
    finished = AgentRun.objects.create(
        owner=alice, prompt="p", provider="scripted", status=RunStatus.COMPLETED, request_payload={"prompt": "p"}
    )
    queued = AgentRun.objects.create(owner=alice, prompt="p", provider="scripted", status=RunStatus.QUEUED)
    mismatches = []
    for name, user in actors.items():
        for action, surfaces in SURFACES.items():
            expected = action in EXPECTED[name]
            if action == A.BULK_CANCEL:
                decided = policy.actionable_runs(user, action).filter(pk=queued.pk).exists()
            else:
                decided = policy.may(user, action, None if action == A.START else finished)
            if decided != expected:
                mismatches.append(f"policy: {name} {action} -> {decided}, table says {expected}")
            for surface in surfaces:
                gated = surface == "admin" and not policy.may_use_admin(user)  # Django's staff-only site
                got = attempt(surface, action, user, finished, queued)
                if got != (expected and not gated):
                    mismatches.append(f"{surface}: {name} {action} -> {got}, expected {expected and not gated}")
    assert not mismatches, json.dumps(mismatches, indent=1)
    assert AgentRun.objects.get(pk=queued.pk).status == RunStatus.QUEUED  # nothing was changed on the way
    assert AgentRun.objects.get(pk=finished.pk).status == RunStatus.COMPLETED


# --- the docs' table (docs/operations/security.md) is the code's ----------------------------------
README_ROWS = {
    "start a run": A.START,
    "see, stream": A.SEE,
    "cancel": A.CANCEL,
    "approve / deny": A.APPROVE,
    "bulk cancel (API, admin action)": A.BULK_CANCEL,
}
README_COLUMNS = {
    "anonymous": "anonymous",
    "owner (own run)": "owner",
    "other user": "other_user",
    "staff": "staff",
    "staff + `cancel_agentrun`": "staff_cancel",
    "staff + `approve_agentrun`": "staff_approve",
}
CELLS = {
    "yes": policy.Verdict.ALLOWED,
    "404": policy.Verdict.NOT_FOUND,
    "403": policy.Verdict.FORBIDDEN,
    "401 / sign-in": policy.Verdict.UNAUTHENTICATED,
}


def readme_table() -> dict[tuple[str, policy.Action], str]:
    from tests.conftest import ROOT

    text = (ROOT / "docs" / "operations" / "security.md").read_text()
    lines = [line for line in text[text.index("## Who may do what") :].splitlines() if line.startswith("|")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    table = {}
    for line in lines[2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        if cells[0] in README_ROWS:
            for column, cell in zip(header[1:], cells[1:]):
                table[(README_COLUMNS[column], README_ROWS[cells[0]])] = cell
    return table


@pytest.mark.django_db
def test_the_readme_permission_table_is_what_the_policy_decides(actors, alice, bob):
    alices = AgentRun.objects.create(owner=alice, prompt="p", provider="scripted", status=RunStatus.QUEUED)
    table = readme_table()
    assert len(table) == len(README_ROWS) * len(README_COLUMNS)
    for (name, action), cell in table.items():
        user = actors[name]
        if action == A.BULK_CANCEL:
            if name == "anonymous":
                assert cell == "401 / sign-in" and not policy.authenticated(user)
                continue
            own = AgentRun.objects.create(owner=user, prompt="p", provider="scripted", status=RunStatus.QUEUED)
            reach = set(
                policy.actionable_runs(user, action).filter(pk__in=[own.pk, alices.pk]).values_list("pk", flat=True)
            )
            expected = {"own runs": {own.pk}, "every run": {own.pk, alices.pk}}[cell]
            if name == "owner":  # alice's run is her own too
                expected = {own.pk, alices.pk}
            assert reach == expected, (name, cell)
            continue
        # "owner (own run)" acts on alice's run as alice; every other column on alice's run too.
        run = None if action == A.START else alices
        assert policy.verdict(user, action, run) == CELLS[cell], (name, action, cell)


# --- who may use a saved agent or a connection, on every surface that starts a run (issue 48) -----
# A restricted agent and a restricted connection name one user and one group. Each actor tries to
# start a run with each through every surface: refused, the surface says so (403 with ``detail``,
# the playground's JSON, exit 2) and no run row is made; allowed, the run is made.
USERS_OF: dict[str, bool] = {
    "not_named": False,
    "named": True,
    "in_group": True,
    "staff_without_change": False,
    "staff_with_change": True,  # change_agent / change_connection: they set these up
    "superuser": True,
}
# (the playground's fork runs in a thread of its own, which sees no row of this test's transaction:
# it goes through the same runtime.fork as the API's, and answers UseRefused as its start does)
# every way to be allowed or refused, on the surfaces (the others are asked of the policy alone,
# below: they take the same path as one of these)
SURFACE_ACTORS = ("not_named", "named", "in_group", "staff_with_change")
START_SURFACES = ("api", "api_thread", "api_fork", "lg", "ag_ui", "playground", "cli")


def _hang_up(response) -> None:
    """Stop reading a stream as a client that goes away: the test client's wrapper of the stream
    closes the response without closing this test's database connection (``response.close()``
    alone would: its ``request_finished`` closes old connections)."""
    response._iterator.close()


@pytest.fixture
def restricted(django_user_model):
    from django.contrib.auth.models import Group

    from nrllm_agents.catalog import agents
    from nrllm_agents.models import Agent, Connection

    team = Group.objects.create(name="team")

    def user(name: str, **extra):
        return django_user_model.objects.create_user(name, **extra)

    actors = {
        "not_named": user("outsider"),
        "named": user("named"),
        "in_group": user("member"),
        "staff_without_change": user("staffer", is_staff=True),
        "staff_with_change": user("setter", is_staff=True),
        "superuser": django_user_model.objects.create_superuser("boss", "boss@example.com", "pw"),
    }
    actors["in_group"].groups.add(team)
    actors["staff_with_change"].user_permissions.add(
        *Permission.objects.filter(codename__in=("change_agent", "change_connection"))
    )
    agents.save("secret-agent", {"provider": "scripted", "script": [{"content": "hi"}], "tools": []})
    connection = Connection(name="paid", kind="openai", default_model="m")
    connection.set_url("https://llm.example.com/v1")
    connection.save()
    agents.save("via-paid", {"connection": "paid", "tools": []})  # open itself: the connection decides
    for row in (Agent.objects.get(name="secret-agent"), connection):
        row.allowed_users.add(actors["named"])
        row.allowed_groups.add(team)
    return {name: django_user_model.objects.get(pk=u.pk) for name, u in actors.items()}


def _start(surface: str, subject: str, user, parent: AgentRun) -> tuple[int, str]:
    """Start a run as ``user`` through ``surface`` with the restricted ``subject`` (``agent`` or
    ``connection``); returns the HTTP status (the CLI's: its exit code) and what was said."""
    from django.core.management import CommandError, call_command

    from nrllm_agents.models import Thread

    c = _client(user)
    fields = {"agent": "secret-agent"} if subject == "agent" else {"connection": "paid", "model": "m"}
    assistant = "secret-agent" if subject == "agent" else "via-paid"  # the protocols start from an agent
    body = {"prompt": "p", **fields}
    if surface == "api":
        response = c.post("/api/runs/", body, content_type="application/json")
    elif surface == "api_thread":
        thread = Thread.objects.create(owner=user)
        response = c.post(f"/api/threads/{thread.pk}/messages/", body, content_type="application/json")
    elif surface == "api_fork":
        response = c.post(f"/api/runs/{parent.pk}/fork/", fields, content_type="application/json")
    elif surface == "lg":
        lg = {"assistant_id": assistant, "input": {"messages": [{"role": "user", "content": "p"}]}}
        response = c.post("/lg/runs", lg, content_type="application/json")
    elif surface == "ag_ui":
        ag = {"threadId": str(uuid.uuid4()), "runId": str(uuid.uuid4()), "state": {}, "tools": [], "context": []}
        ag |= {"messages": [{"id": "m", "role": "user", "content": "p"}], "forwardedProps": {}}
        response = c.post(f"/ag-ui/agents/{assistant}/", ag, content_type="application/json")
        if getattr(response, "streaming", False):  # started: its first frame, then the client goes
            next(iter(response.streaming_content))
            _hang_up(response)
    elif surface == "playground":
        form = {**body, "mode": "queued", "provider": "scripted", "max_iterations": 2}
        response = c.post("/playground/runs/", form, headers=JSON)
    else:
        flags = ["--agent", "secret-agent"] if subject == "agent" else ["--connection", "paid", "--model", "m"]
        err = io.StringIO()
        try:
            call_command(
                "agent_run", "p", *flags, "--owner", user.username, "--queued", stdout=io.StringIO(), stderr=err
            )
        except CommandError as exc:
            return exc.returncode, str(exc)
        return 0, err.getvalue()
    said = response.content.decode() if not getattr(response, "streaming", False) else ""
    return response.status_code, said


@pytest.mark.django_db
def test_a_restricted_agent_or_connection_starts_only_for_whom_it_names_on_every_surface(restricted, runtime):
    mismatches = []
    for name in SURFACE_ACTORS:
        user = restricted[name]
        # a stopped run of theirs to fork (no agent, no connection): the fork names them
        parent_id = runtime.run({"prompt": "p", "script": [{"content": "a"}, {"content": "b"}]}, owner=user).run_id
        parent = AgentRun.objects.get(pk=parent_id)
        for subject in ("agent", "connection"):
            may = USERS_OF[name]
            for surface in START_SURFACES:
                before, threads = AgentRun.objects.count(), Thread.objects.count()
                code, said = _start(surface, subject, user, parent)
                started = AgentRun.objects.count() - before
                # a refusal writes nothing: no thread either (api_thread's is the test's own)
                created = Thread.objects.count() - threads - (surface == "api_thread")
                if not may and created:
                    mismatches.append(f"{surface}: {name} {subject} refused but left {created} thread(s)")
                what = f"{subject} 'secret-agent'" if subject == "agent" else f"{subject} 'paid'"
                if may and (code not in (0, 200, 201, 202) or started != 1):
                    mismatches.append(f"{surface}: {name} {subject} -> {code} {said[:200]}, {started} run(s)")
                if not may and (code not in (2, 403) or started or f"you may not use {what}" not in said):
                    mismatches.append(f"{surface}: {name} {subject} -> {code} {said[:200]}, {started} run(s)")
    assert not mismatches, json.dumps(mismatches, indent=1)


@pytest.mark.django_db
def test_the_lists_offer_only_what_the_user_may_use(restricted):
    for name, user in restricted.items():
        may = USERS_OF[name]
        assert (policy.may_use_agent(user, "secret-agent"), policy.may_use_connection(user, "paid")) == (may, may)
        c = _client(user)
        agents = {a["name"] for a in c.get("/api/agents/").json()}
        assert agents == ({"secret-agent", "via-paid"} if may else {"via-paid"}), name
        searched = {
            a["assistant_id"] for a in c.post("/lg/assistants/search", {}, content_type="application/json").json()
        }
        assert searched == agents, name
        # a read of one shows what the lists show: another team's agent is not found
        assert c.get("/api/agents/secret-agent/").status_code == (200 if may else 404), name
        assert c.get("/lg/assistants/secret-agent").status_code == (200 if may else 404), name
        assert c.get("/lg/assistants/secret-agent/schemas").status_code == (200 if may else 404), name
        assert c.get("/api/agents/via-paid/").status_code == 200, name
        page = c.get("/playground/").content.decode()
        assert ('value="secret-agent"' in page, 'value="paid"' in page) == (may, may), name
        listed = c.get("/api/connections/")
        if policy.may_configure(user, policy.Setup.VIEW, "connection"):
            assert {row["name"] for row in listed.json()} == ({"paid"} if may else set()), name
            assert c.get("/api/connections/paid/").status_code == (200 if may else 404), name
        assert set(policy.usable_connections(user).values_list("name", flat=True)) == ({"paid"} if may else set())


@pytest.mark.django_db
def test_the_howto_s_refusal_runs_as_written(django_user_model):
    """docs/howto/providers.md, "Who may use an agent or a connection": its command, as written,
    for an agent that names another user."""
    import shlex

    from django.core.management import CommandError, call_command

    from nrllm_agents.catalog import agents
    from nrllm_agents.models import Agent
    from tests.conftest import ROOT

    text = (ROOT / "docs" / "howto" / "providers.md").read_text()
    block = text[text.index("## Who may use an agent or a connection") :].split("```sh\n", 1)[1].split("```", 1)[0]
    django_user_model.objects.create_user("mallory")
    agents.save("helper", {"provider": "scripted", "script": [{"content": "42"}], "tools": []})
    Agent.objects.get(name="helper").allowed_users.add(django_user_model.objects.create_user("alice"))
    lines = [line for line in block.splitlines() if line.strip()]
    assert lines
    for line in lines:
        words = shlex.split(line, comments=True)
        assert words[:2] == [".venv/bin/python", "manage.py"], line
        with pytest.raises(CommandError) as refused:
            call_command(*words[2:], stdout=io.StringIO(), stderr=io.StringIO())
        assert refused.value.returncode == 2 and str(refused.value) == "you may not use agent 'helper'", line
        assert line.endswith(f"# exit 2: {refused.value}")  # the page says what it prints
    assert not AgentRun.objects.exists()


@pytest.mark.django_db
def test_the_admin_edits_who_may_use_an_agent_and_a_connection(restricted, admin_client):
    from django.contrib.auth.models import Group

    from nrllm_agents.models import Agent, Connection

    outsider, team = restricted["not_named"], Group.objects.get(name="team")
    agent, connection = Agent.objects.get(name="secret-agent"), Connection.objects.get(name="paid")
    for url in (
        f"/admin/nrllm_agents/agent/{agent.pk}/change/",
        f"/admin/nrllm_agents/connection/{connection.pk}/change/",
    ):
        page = admin_client.get(url).content.decode()
        assert 'id="id_allowed_users"' in page and 'id="id_allowed_groups"' in page and "selectfilter" in page, url
    latest = agent.latest().definition
    changed = admin_client.post(
        f"/admin/nrllm_agents/agent/{agent.pk}/change/",
        {"description": "", "definition": json.dumps(latest), "allowed_users": [outsider.pk], "allowed_groups": [],
         "versions-TOTAL_FORMS": "1", "versions-INITIAL_FORMS": "1", "versions-MIN_NUM_FORMS": "0",
         "versions-MAX_NUM_FORMS": "1000"},
    )  # fmt: skip
    assert changed.status_code == 302, changed.content.decode()[:2000]
    assert policy.may_use_agent(outsider, "secret-agent") and not policy.may_use_agent(restricted["in_group"], agent)
    changed = admin_client.post(
        f"/admin/nrllm_agents/connection/{connection.pk}/change/",
        {"name": "paid", "kind": "openai", "base_url": "https://llm.example.com/v1", "default_model": "m",
         "api_key": "", "allowed_groups": [team.pk]},
    )  # fmt: skip
    assert changed.status_code == 302, changed.content.decode()[:2000]
    assert policy.may_use_connection(restricted["in_group"], "paid")
    assert not policy.may_use_connection(restricted["named"], connection)  # no longer named
    connection.allowed_groups.clear()
    assert policy.may_use_connection(outsider, "paid")  # both lists empty: open to everyone again
