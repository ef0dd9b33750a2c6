"""The permission matrix: actors × actions × surfaces, one answer everywhere (issues 9 and 13).

Guards issue 9 finding 3 (staff without the dedicated permissions acted on anyone's runs through
the API and the playground) and issue 13 (two ``visible_runs`` copies that disagreed): every
surface must give the answer of ``nrllm_agents.access.policy``, and that answer must be the table
below. Each action is tried on a run where an allowed caller changes nothing (a finished run
answers 409 to cancel and approve; bulk cancel is a dry run; start is sent an empty form), so
the matrix is walked on one set of rows.
"""

from __future__ import annotations

import json

import pytest
from django.contrib.auth.models import AnonymousUser, Permission
from django.test import Client

from nrllm_agents.access import policy
from nrllm_agents.models import AgentRun, RunStatus

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
    A.APPROVE: ("api", "playground"),
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
    if surface in ("api", "playground", "stream"):
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
