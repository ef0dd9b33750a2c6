"""Retention keeps the audit (issue 45), on PostgreSQL and SQLite: past ``content_days`` a stopped
run keeps its skeleton and loses its content; past ``runs_days`` its tree goes whole; a run still
moving is never touched; and every surface shows a purged run as such."""

from __future__ import annotations

import io
import json
from datetime import timedelta
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.urls import reverse
from django.utils import timezone
from rest_framework.test import APIClient

from nrllm_agents import store
from nrllm_agents.domain import Usage
from nrllm_agents.models import AgentRun, AgentRunEvent, CancelSource, Note, RunStatus, Thread
from nrllm_agents.runtime import threads
from nrllm_agents.store import retention
from tests.integration import runs

pytestmark = pytest.mark.django_db

CONTENT = retention.Policy(content_days=30)
LATER = timedelta(days=31)  # a pass this much later finds every stopped run due
SECRET = "my card is 4111"
CALC = {"tool_calls": [{"name": "calculator", "arguments": {"expression": "6*7"}}]}
SKELETON_RUN = (
    "status",
    "termination_reason",
    "created_at",
    "started_at",
    "finished_at",
    "stopped_at",
    "owner_id",
    "provider",
    "model",
    "connection",
    "agent_version_id",
    "prompt_tokens",
    "completion_tokens",
    "cost",
    "iterations",
    "parent_id",
    "tree_root_id",
    "tree_parent_id",
    "thread_id",
    "thread_position",
    "cancel_requested_at",
    "cancelled_by_id",
    "cancelled_by_name",
    "cancel_source",
    "cancel_reason",
)
SKELETON_STEP = ("kind", "sequence", "round", "created_at", "duration_ms")


def finished_run(runtime, owner=None, **extra: Any) -> Any:
    """A run that called a tool with a secret and answered with it (scripted provider)."""
    script = [CALC, {"content": f"42, and {SECRET}"}]
    result = runtime.run(
        {"prompt": f"compute; {SECRET}", "tools": ["calculator"], "script": script, "system": "be terse", **extra},
        owner=owner,
    )
    assert result.status == RunStatus.COMPLETED
    return result.run_id


def cancelled_run(runtime, owner=None) -> Any:
    """A run an operator cancelled at the boundary after its model asked for the tool."""

    def cancel(step: dict[str, Any]) -> None:
        if step["kind"] == "llm":
            runtime.cancel(step["run_id"], source=CancelSource.API, reason="runaway", by=owner)

    result = runtime.run(
        {"prompt": SECRET, "tools": ["calculator"], "script": [CALC, {"content": "x"}]}, owner=owner, on_step=cancel
    )
    assert result.status == RunStatus.CANCELLED
    return result.run_id


def audit(run_id: Any) -> tuple[dict[str, Any], list[dict[str, Any]], list[dict[str, Any]]]:
    """The run's skeleton fields, its steps' skeleton fields, and its steps' usage and flags."""
    row = AgentRun.objects.filter(pk=run_id).values(*SKELETON_RUN).get()
    steps = list(AgentRunEvent.objects.filter(run_id=run_id).order_by("sequence").values(*SKELETON_STEP))
    kept = [
        {k: e.payload.get(k) for k in ("usage", "interrupted", "price")}
        | ({"cancel": e.payload} if e.kind == "cancelled" else {})
        for e in AgentRunEvent.objects.filter(run_id=run_id).order_by("sequence")
    ]
    return row, steps, kept


def purge_all(now=None) -> retention.RetentionReport:
    return retention.apply(CONTENT, now=(now or timezone.now()) + LATER)


def content_left(run_id: Any) -> str:
    """Everything a purge must remove, as text: a secret found here survived."""
    run = AgentRun.objects.get(pk=run_id)
    parts = [run.prompt, run.final_text, json.dumps(run.options), json.dumps(run.request_payload)]
    parts += [json.dumps(e.payload) for e in AgentRunEvent.objects.filter(run_id=run_id).exclude(kind="cancelled")]
    parts += list(Note.objects.filter(run_id=run_id).values_list("body", flat=True))
    return "\n".join(parts)


def test_a_purge_keeps_every_skeleton_field_and_drops_the_content(runtime, alice):
    done, cancelled = finished_run(runtime, alice), cancelled_run(runtime, alice)
    Note.objects.create(run_id=done, title="n", body=SECRET)
    approved = AgentRunEvent.objects.filter(run_id=done, kind="llm").first()
    assert approved is not None and SECRET in content_left(done) and SECRET in content_left(cancelled)
    before = {pk: audit(pk) for pk in (done, cancelled)}

    report = purge_all()

    assert (report.purged_runs, report.deleted_runs) == (2, 0)
    for pk in (done, cancelled):
        assert audit(pk) == before[pk]  # status, times, who, spend, links; each step's skeleton and usage
        assert SECRET not in content_left(pk)
        row = AgentRun.objects.get(pk=pk)
        assert row.purged_at is not None and row.prompt == "" and "system" not in row.options
        steps = AgentRunEvent.objects.filter(run_id=pk)
        assert all(e.purged_at == row.purged_at for e in steps)
        assert all(e.payload.get("purged") is True for e in steps if e.kind != "cancelled")
    tool = AgentRunEvent.objects.get(run_id=done, kind="tool").payload
    assert tool["name"] == "calculator" and "arguments" not in tool and "result" not in tool
    cancel = AgentRun.objects.get(pk=cancelled)
    assert (cancel.cancel_reason, cancel.cancel_source, cancel.cancelled_by_id) == ("runaway", "api", alice.pk)
    assert purge_all().purged_runs == 0  # once


def test_a_run_still_moving_is_never_touched(runtime):
    moving = {
        "running": runs.running(steps=2),
        "waiting": runs.waiting(),
        "queued": runs.queued(),
        "cancelled, not yet stopped": runs.running(steps=1),
    }
    assert store.cancel(moving["cancelled, not yet stopped"], source=CancelSource.API).applied
    young = finished_run(runtime)
    before = {name: (runs.row(pk).prompt, [e.payload for e in runs.stream(pk)]) for name, pk in moving.items()}

    report = retention.apply(retention.Policy(content_days=30, runs_days=60), now=timezone.now() + timedelta(days=90))

    assert (report.purged_runs, report.deleted_runs) == (0, 1)  # only the stopped one: deleted (before any purge)
    assert not AgentRun.objects.filter(pk=young).exists()
    for name, pk in moving.items():
        row = runs.row(pk)
        assert row.purged_at is None, name
        assert (row.prompt, [e.payload for e in runs.stream(pk)]) == before[name], name


def test_runs_days_deletes_a_stopped_tree_whole_and_keeps_a_tree_still_moving():
    root = runs.completed()
    child = runs.completed(tree_parent_id=root, tree_root_id=root, tree_depth=1)
    grandchild = runs.completed(tree_parent_id=child, tree_root_id=root, tree_depth=2)
    busy_root = runs.completed()
    busy_child = runs.running(tree_parent_id=busy_root, tree_root_id=busy_root, tree_depth=1)
    young = runs.completed()
    policy = retention.Policy(runs_days=10, batch=1)
    now = timezone.now() + timedelta(days=11)
    assert AgentRun.objects.filter(pk=young).update(finished_at=timezone.now() + timedelta(days=5))

    assert retention.apply(policy, now=now, dry_run=True).deleted_runs == 3
    assert AgentRun.objects.filter(pk=root).exists()
    report = retention.apply(policy, now=now)

    assert report.deleted_runs == 3 and report.batches >= 1
    assert not AgentRun.objects.filter(pk__in=[root, child, grandchild]).exists()
    assert not AgentRunEvent.objects.filter(run_id__in=[root, child, grandchild]).exists()
    assert AgentRun.objects.filter(pk__in=[busy_root, busy_child, young]).count() == 3


def test_batches_are_small_and_the_pass_goes_on_until_nothing_is_due(runtime):
    ids = [finished_run(runtime) for _ in range(5)]
    report = retention.apply(retention.Policy(content_days=1, batch=2), now=timezone.now() + timedelta(days=2))
    assert (report.purged_runs, report.batches) == (5, 3)
    assert AgentRun.objects.filter(pk__in=ids, purged_at__isnull=True).count() == 0
    partial = retention.apply(retention.Policy(content_days=1, batch=2), max_batches=1)  # nothing due yet
    assert partial.purged_runs == 0


def test_the_command_reports_what_it_would_do_and_what_it_did(runtime, settings):
    pk = finished_run(runtime)
    out = io.StringIO()
    with pytest.raises(CommandError) as refused:
        call_command("agent_retention", stdout=out)
    assert refused.value.returncode == 1 and "no retention policy" in str(refused.value)
    settings.NRLLM_AGENTS = {"RETENTION": {"content_days": 1, "runs_days": None}}
    AgentRun.objects.filter(pk=pk).update(
        created_at=timezone.now() - timedelta(days=3),
        started_at=timezone.now() - timedelta(days=3),
        stopped_at=timezone.now() - timedelta(days=3),
        finished_at=timezone.now() - timedelta(days=3),
    )
    call_command("agent_retention", "--dry-run", stdout=out)
    assert "would purge the content of 1 runs" in out.getvalue()
    assert runs.row(pk).purged_at is None
    call_command("agent_retention", stdout=out)
    assert "retention: purged the content of 1 runs (5 steps), deleted 0 runs" in out.getvalue()
    assert runs.row(pk).purged_at is not None


# --- every surface shows a purged run as such -------------------------------------------------------
@pytest.fixture
def staff(django_user_model):
    user = django_user_model.objects.create_user("ops", password="pw", is_staff=True, is_superuser=True)
    return user


def test_the_api_shows_a_purged_run_and_refuses_its_fork(runtime, alice):
    pk = finished_run(runtime, alice)
    api = APIClient()
    api.force_authenticate(alice)
    before = api.get(reverse("nrllm_api:run-detail", args=[pk])).json()
    purge_all()

    run = api.get(reverse("nrllm_api:run-detail", args=[pk])).json()
    assert run["purged_at"] and before["purged_at"] is None
    assert {k: v for k, v in run.items() if k not in ("purged_at", "request", "final_text")} == {
        k: v for k, v in before.items() if k not in ("purged_at", "request", "final_text")
    }
    assert run["request"]["prompt"] == "" and run["final_text"] is None
    events = api.get(reverse("nrllm_api:run-events", args=[pk])).json()["results"]
    assert [e["kind"] for e in events] == ["request", "llm", "tool", "request", "llm"]
    assert all(e["payload"]["purged"] is True for e in events)
    listed = api.get(reverse("nrllm_api:run-list")).json()["results"]
    assert [r["purged_at"] is not None for r in listed if r["run_id"] == str(pk)] == [True]

    fork = api.post(reverse("nrllm_api:run-fork", args=[pk]), {}, format="json")
    assert fork.status_code == 409
    assert "purged" in fork.json()["detail"] and "cannot be forked" in fork.json()["detail"]


def test_the_cli_refuses_the_fork_of_a_purged_run(runtime):
    pk = finished_run(runtime)
    purge_all()
    with pytest.raises(CommandError) as refused:
        call_command("agent_fork", str(pk), stdout=io.StringIO())
    assert refused.value.returncode != 0 and "purged" in str(refused.value)
    out = io.StringIO()
    call_command("agent_events", str(pk), stdout=out)
    assert "content purged by the retention policy" in out.getvalue()


def test_the_admin_and_the_playground_show_a_purged_run(runtime, client, staff):
    pk = finished_run(runtime, staff)
    purge_all()
    client.force_login(staff)

    page = client.get(reverse("admin:nrllm_agents_agentrun_change", args=[pk]))
    assert page.status_code == 200
    html = page.content.decode()
    assert 'id="run-purged"' in html and "content purged by the retention policy" in html
    assert 'id="fork-run-form"' not in html
    forked = client.post(
        reverse("admin:nrllm_agents_agentrun_changelist"),
        {"action": "fork_selected", "_selected_action": [str(pk)]},
        follow=True,
    )
    notes = [str(m) for m in forked.context["messages"]]
    assert any("Not forked" in m and "purged" in m for m in notes), notes

    playground = client.get(reverse("nrllm_web:run", args=[pk]))
    assert playground.status_code == 200
    assert 'id="run-purged"' in playground.content.decode()
    assert 'data-can-fork="false"' in playground.content.decode()
    refused = client.post(reverse("nrllm_web:fork", args=[pk]), {}, HTTP_ACCEPT="application/json")
    assert refused.status_code == 409 and "purged" in refused.content.decode()


def post_and_run(runtime, thread: Thread, prompt: str, owner) -> Any:
    """Post a message and execute its run here (in a test transaction nothing dispatches it)."""
    run_id = runtime.post(thread.pk, {"prompt": prompt, "script": [{"content": f"re: {prompt}"}]}, owner=owner)
    assert runtime.run_queued(run_id).status == RunStatus.COMPLETED
    return run_id


def test_a_thread_whose_turns_were_purged_starts_from_what_is_left_and_says_so(runtime, alice):
    thread = threads.create(owner=alice)
    first = post_and_run(runtime, thread, SECRET, alice)
    second = post_and_run(runtime, thread, "and then?", alice)
    purge_all()

    third = post_and_run(runtime, thread, "where were we?", alice)
    opening = AgentRunEvent.objects.get(run_id=third, kind="thread").payload
    assert opening["purged_turns"] == 2 and opening["after_run"] == str(second)
    assert opening["messages"] == [{"role": "user", "content": "where were we?"}]
    assert SECRET not in json.dumps(opening)
    out = io.StringIO()
    call_command("agent_events", str(third), stdout=out)
    assert "0 messages, 2 earlier turns purged" in out.getvalue()

    api = APIClient()
    api.force_authenticate(alice)
    body = api.get(reverse("nrllm_api:thread-detail", args=[thread.pk])).json()
    assert [r["purged_at"] is not None for r in body["runs"]] == [True, True, False]
    assert body["purged_turns"] == 2 and body["messages"][-1] == {"role": "assistant", "content": "re: where were we?"}

    state = api.get(reverse("nrllm_lg:thread-history", args=[thread.pk])).json()
    assert [s["metadata"]["run_id"] for s in state] == [str(third), str(second), str(first)]
    purged = [s for s in state if s["metadata"]["purged_at"]]
    assert len(purged) == 2 and all(s["values"]["messages"] == [] for s in purged)


# --- a pass racing a cancel and a settle ---------------------------------------------------------
def whole(run_id: Any) -> bool:
    """Purged with every step (its stream complete: a cancelled run ends with its ``cancelled``
    step), or not purged at all, content intact."""
    row, steps = runs.row(run_id), runs.stream(run_id)
    if row.purged_at is None:
        return all(e.purged_at is None and "purged" not in e.payload for e in steps)
    complete = row.status != RunStatus.CANCELLED or steps[-1].kind == "cancelled"
    return complete and all(e.purged_at == row.purged_at for e in steps)


@pytest.mark.postgres_only
@pytest.mark.django_db(transaction=True)  # real threads, each on its own connection: they see commits only
def test_a_pass_racing_a_cancel_and_a_settle_leaves_each_run_whole():
    from tests.conftest import race_rounds
    from tests.integration.runtime.test_races import race

    now = timezone.now() + timedelta(days=2)
    policy = retention.Policy(content_days=1, batch=1)

    def cancel_and_stop(run_id: Any) -> None:
        assert store.cancel(run_id, source=CancelSource.API, reason="race").applied
        ack = store.acknowledge_cancel(run_id, sequence=2, round=0, iterations=1, usage=Usage(1, 1))
        assert ack.applied

    def passes() -> int:
        return sum(retention.apply(policy, now=now).purged_runs for _ in range(3))

    for _ in range(race_rounds(20)):
        cancelled, settled = runs.running(steps=2), runs.running(steps=2)
        outcomes = race(
            lambda: cancel_and_stop(cancelled),
            lambda: store.settle(settled, status="completed", reason="completed", owner=runs.OWNER),
            passes,
        )
        assert not [o for o in outcomes if isinstance(o, BaseException)], outcomes
        assert whole(cancelled) and whole(settled)
        retention.apply(policy, now=now)
        assert runs.row(cancelled).purged_at and runs.row(settled).purged_at
        assert runs.kinds(cancelled) == ["request", "request", "cancelled"] and whole(cancelled)


def test_the_thread_pages_and_the_cli_show_a_purged_turn_as_purged(runtime, client, staff):
    thread = threads.create(owner=staff)
    first = post_and_run(runtime, thread, SECRET, staff)
    purge_all()
    post_and_run(runtime, thread, "again", staff)
    client.force_login(staff)
    day = f"{runs.row(first).purged_at:%Y-%m-%d}"

    for page in (
        client.get(reverse("admin:nrllm_agents_thread_change", args=[thread.pk])),
        client.get(reverse("nrllm_web:thread", args=[thread.pk])),
    ):
        html = page.content.decode()
        assert page.status_code == 200 and f"content purged on {day}" in html and SECRET not in html
        assert "again" in html
    out = io.StringIO()
    call_command("agent_threads", "show", str(thread.pk), stdout=out)
    assert f"#0 {first} completed: (content purged on {day})" in out.getvalue()
    assert "transcript (2 messages):" in out.getvalue()


@pytest.mark.django_db(transaction=True)  # the pass runs on a thread of its own, as a worker's does
def test_every_workers_maintenance_pass_applies_the_policy(runtime, settings, caplog):
    import threading

    from nrllm_agents.workers import maintenance

    old, young = finished_run(runtime), finished_run(runtime)
    past = timezone.now() - timedelta(days=3)
    AgentRun.objects.filter(pk=old).update(created_at=past, started_at=past, stopped_at=past, finished_at=past)
    thread = threading.Thread(target=maintenance.maintain, args=("retention-test",))
    thread.start()
    thread.join(60)
    assert runs.row(old).purged_at is None  # no policy: nothing

    settings.NRLLM_AGENTS = {"RETENTION": {"content_days": 1, "runs_days": None}}
    caplog.set_level("INFO", logger=maintenance.logger.name)
    thread = threading.Thread(target=maintenance.maintain, args=("retention-test",))
    thread.start()
    thread.join(60)
    assert runs.row(old).purged_at is not None and runs.row(young).purged_at is None
    assert any("retention: purged the content of 1 runs" in r.getMessage() for r in caplog.records)
