"""The Django admin for runs, through Django's test client and the real runtime (PostgreSQL and SQLite).

Runs are made by ``AgentRuntime`` with scripted providers; queued runs stay queued because a
test transaction never commits (no worker is woken), except where a test says otherwise.
"""

from __future__ import annotations

import re
import threading
import uuid
from html import escape

import pytest
from django.contrib import messages
from django.contrib.auth.models import Permission
from django.contrib.staticfiles import finders
from django.db import connection, connections
from django.templatetags.static import static
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from nrllm_agents.models import AgentRun, AgentRunEvent, CancelSource, Note, RunStatus, TerminationReason
from nrllm_agents.runtime.agent_runtime import ApprovalNotPending, Outcome

pytestmark = pytest.mark.django_db

CHANGELIST = reverse("admin:nrllm_agents_agentrun_changelist")
CONFIRMATION = "admin/nrllm_agents/agentrun/cancel_confirmation.html"
ANSWER = [{"content": "42"}]
CALCULATE = [
    {
        "usage": {"prompt_tokens": 42, "completion_tokens": 18},
        "tool_calls": [{"name": "calculator", "arguments": {"expression": "(17 + 25) * 3"}}],
    },
    {"content": "126", "usage": {"prompt_tokens": 60, "completion_tokens": 4}},
]
NOTE = [{"tool_calls": [{"name": "write_note", "arguments": {"title": "Result", "body": "126"}}]}, {"content": "noted"}]
SLOW = [{"tool_calls": [{"name": "sleep", "arguments": {"seconds": 0.1}}]}] * 20 + [{"content": "too late"}]


def change_url(run_id) -> str:
    return reverse("admin:nrllm_agents_agentrun_change", args=[run_id])


def cancel_url(run_id) -> str:
    """A run's cancel confirmation (its own admin URL; works on Django 5.2 and 6.x alike)."""
    return reverse("admin:nrllm_agents_agentrun_cancel", args=[run_id])


def completed(runtime, prompt: str = "add the numbers", script=CALCULATE, **kw) -> uuid.UUID:
    result = runtime.run({"prompt": prompt, "tools": ["calculator"], "script": script}, **kw)
    assert result.status == RunStatus.COMPLETED
    return result.run_id


def failed(runtime) -> uuid.UUID:
    result = runtime.run({"prompt": "loop forever", "tools": ["calculator"], "script": CALCULATE, "max_iterations": 1})
    assert (result.status, result.termination_reason) == (RunStatus.FAILED, TerminationReason.MAX_ITERATIONS)
    return result.run_id


def waiting(runtime) -> uuid.UUID:
    result = runtime.run({"prompt": "write a note", "tools": ["write_note"], "script": NOTE})
    assert result.status == RunStatus.WAITING_FOR_APPROVAL
    return result.run_id


def queued(runtime, **extra) -> uuid.UUID:
    return runtime.enqueue({"prompt": "later", "script": ANSWER, **extra})


def cancelled_earlier(runtime) -> uuid.UUID:
    run_id = queued(runtime)
    runtime.cancel(run_id, source=CancelSource.CLI, reason="earlier")
    return run_id


def row(run_id) -> AgentRun:
    return AgentRun.objects.select_related("cancelled_by").get(pk=run_id)


def snapshot(run_id) -> tuple:
    return tuple(
        AgentRun.objects.filter(pk=run_id)
        .values_list(
            "status",
            "termination_reason",
            "finished_at",
            "stopped_at",
            "cancel_requested_at",
            "cancel_source",
            "cancel_reason",
            "cancelled_by",
        )
        .get()
    )


def shown(response) -> list[tuple[int, str]]:
    return [(m.level, m.message) for m in response.context["messages"]]


def listed(response) -> set[uuid.UUID]:
    return {run.pk for run in response.context["cl"].result_list}


def bulk(ids, **extra) -> dict:
    return {"action": "cancel_selected", "_selected_action": [str(i) for i in ids], **extra}


@pytest.fixture
def operator(django_user_model):
    return django_user_model.objects.create_superuser("op", "op@example.com", "pw")


@pytest.fixture
def op_client(client, operator):
    client.force_login(operator)
    return client


@pytest.fixture
def viewer(django_user_model):
    """Staff who may view runs but holds no cancel permission."""
    user = django_user_model.objects.create_user("viewer", is_staff=True)
    user.user_permissions.add(Permission.objects.get(codename="view_agentrun"))
    return user


class InThread:
    """``runtime.run`` in another thread; ``run_id`` is known once its first step is seen."""

    def __init__(self, runtime, script) -> None:
        self.started, self.result, self.run_id = threading.Event(), None, None
        self.thread = threading.Thread(target=self._work, args=(runtime, script))
        self.thread.start()
        assert self.started.wait(30), "the run never recorded a step"

    def _observe(self, step: dict) -> None:
        self.run_id = self.run_id or uuid.UUID(step["run_id"])
        self.started.set()

    def _work(self, runtime, script) -> None:
        try:
            self.result = runtime.run(
                {"prompt": "sleep a lot", "tools": ["sleep"], "script": script, "max_iterations": len(script)},
                on_step=self._observe,
            )
        finally:
            connections.close_all()

    def join(self):
        self.thread.join(30)
        assert not self.thread.is_alive()
        return self.result


# --- the list -------------------------------------------------------------------------------
def test_changelist_lists_runs_with_step_counts_filters_and_search(op_client, runtime):
    done, bad = completed(runtime), failed(runtime)
    later = queued(runtime, provider="openai", model="gpt-x", script=None)
    response = op_client.get(CHANGELIST)
    assert response.status_code == 200
    html = response.content.decode()
    for title in ("By status", "By termination reason", "By provider", "By created at"):
        assert title in html
    assert f'href="{static("nrllm_agents/admin.css")}"' in html
    counts = {run.pk: run.step_count for run in response.context["cl"].result_list}
    assert counts == {run_id: AgentRunEvent.objects.filter(run_id=run_id).count() for run_id in (done, bad, later)}
    assert counts[done] == 5 and counts[later] == 0

    def search(**params) -> set[uuid.UUID]:
        return listed(op_client.get(CHANGELIST, params))

    assert search(status__exact="completed") == {done}
    assert search(status__exact="queued") == {later}
    assert search(termination_reason__exact="max_iterations") == {bad}
    assert search(provider="openai") == {later}
    today = row(done).created_at
    assert search(created_at__year=today.year, created_at__month=today.month) == {done, bad, later}
    assert search(created_at__year=today.year - 1) == set()
    assert search(q="numbers") == {done}
    assert search(q=str(bad)) == {bad}
    assert search(q=str(later)[:8]) == {later}
    assert search(q="no such words") == set()


def test_changelist_query_count_does_not_grow_with_rows(op_client, runtime, django_user_model):
    def make(n: int) -> None:
        for _ in range(n):
            owner = django_user_model.objects.create_user(f"owner-{uuid.uuid4().hex[:8]}")
            completed(runtime, script=ANSWER, owner=owner)

    def queries() -> int:
        with CaptureQueriesContext(connection) as ctx:
            response = op_client.get(CHANGELIST)
        assert response.status_code == 200
        return len(response.context["cl"].result_list), len(ctx.captured_queries)

    make(5)
    rows5, q5 = queries()
    make(45)
    rows50, q50 = queries()
    assert (rows5, rows50) == (5, 50)
    assert q50 == q5


def test_runs_are_read_only(op_client, runtime):
    done = completed(runtime)
    before = snapshot(done)
    assert op_client.get(reverse("admin:nrllm_agents_agentrun_add")).status_code == 403
    assert op_client.post(change_url(done), {"status": "failed", "prompt": "x", "_save": "1"}).status_code == 403
    delete = reverse("admin:nrllm_agents_agentrun_delete", args=[done])
    assert op_client.post(delete, {"post": "yes"}).status_code == 403
    assert snapshot(done) == before
    actions = [name for name, _ in op_client.get(CHANGELIST).context["action_form"].fields["action"].choices]
    assert actions == ["", "cancel_selected", "fork_selected"]  # no delete_selected


def test_non_staff_never_reach_the_admin(client, django_user_model, runtime):
    run_id = queued(runtime)
    client.force_login(django_user_model.objects.create_user("plain"))
    for response in (
        client.get(CHANGELIST),
        client.get(change_url(run_id)),
        client.post(CHANGELIST, bulk([run_id], post="yes")),
    ):
        assert response.status_code == 302 and response["Location"].startswith(reverse("admin:login"))
    assert row(run_id).status == RunStatus.QUEUED


# --- cancel from the list ---------------------------------------------------------------------
def test_confirmation_page_lists_each_run_and_what_will_happen(op_client, runtime):
    q, w, done, gone = queued(runtime), waiting(runtime), completed(runtime), cancelled_earlier(runtime)
    before = {i: snapshot(i) for i in (q, w, done, gone)}
    response = op_client.post(CHANGELIST, bulk([q, w, done, gone], index="0"))
    assert response.status_code == 200
    assert CONFIRMATION in [t.name for t in response.templates]
    plans = {run.pk: plan for run, plan in response.context["rows"]}
    assert plans == {
        q: "cancel: it is not executing and stops at once",
        w: "cancel: it is not executing and stops at once",
        done: "nothing: already finished (completed)",
        gone: "nothing: already cancelled",
    }
    summary = "2 runs will be cancelled, 1 run already finished, 1 run already cancelled."
    assert response.context["summary"] == summary
    html = response.content.decode()
    assert summary in html and "nothing: already finished (completed)" in html
    for run_id in (q, w, done, gone):
        assert f'name="_selected_action" value="{run_id}"' in html
    assert 'name="csrfmiddlewaretoken"' in html and 'name="reason"' in html
    assert 'name="post" value="yes"' in html and 'name="action" value="cancel_selected"' in html
    assert {i: snapshot(i) for i in before} == before  # showing the page changes nothing


def test_confirming_cancels_active_runs_and_summarises_each_outcome(op_client, operator, runtime):
    q, w, done = queued(runtime), waiting(runtime), completed(runtime)
    bad, gone = failed(runtime), cancelled_earlier(runtime)
    untouched = {i: snapshot(i) for i in (done, bad, gone)}
    response = op_client.post(
        CHANGELIST, bulk([q, w, done, bad, gone], post="yes", reason="  wrong prompt "), follow=True
    )
    summary = "2 runs cancelled, 2 runs already finished, 1 run already cancelled."
    assert shown(response) == [(messages.SUCCESS, summary)]
    for run_id in (q, w):
        run = row(run_id)
        assert (run.status, run.termination_reason) == (RunStatus.CANCELLED, TerminationReason.CANCELLED)
        assert (run.cancel_source, run.cancelled_by, run.cancel_reason) == ("admin", operator, "wrong prompt")
        assert run.stopped_at is not None and run.request_payload is None and run.suspended_state is None
        last = AgentRunEvent.objects.filter(run_id=run_id).order_by("sequence").last()
        assert last.kind == "cancelled"
        assert [last.payload[k] for k in ("by", "source", "reason")] == ["op", "admin", "wrong prompt"]
    with pytest.raises(ApprovalNotPending):
        runtime.approve(w, True)
    assert {i: snapshot(i) for i in untouched} == untouched


def test_nothing_to_cancel_is_a_warning(op_client, runtime):
    done = completed(runtime)
    response = op_client.post(CHANGELIST, bulk([done], post="yes"), follow=True)
    assert shown(response) == [(messages.WARNING, "Nothing to cancel: 1 run already finished.")]


def test_confirmed_cancel_is_one_set_based_call_whatever_the_selection_size(op_client, runtime):
    def cancel(n: int) -> int:
        ids = [queued(runtime) for _ in range(n)]
        with CaptureQueriesContext(connection) as ctx:
            response = op_client.post(CHANGELIST, bulk(ids, post="yes"), follow=True)
        assert shown(response)[0][1] == f"{n} runs cancelled."
        assert AgentRun.objects.filter(pk__in=ids, status=RunStatus.CANCELLED, stopped_at__isnull=False).count() == n
        assert AgentRunEvent.objects.filter(run_id__in=ids, kind="cancelled").count() == n
        return len(ctx.captured_queries)

    assert cancel(2) == cancel(12)


def test_select_across_cancels_every_run_the_filter_matches(op_client, runtime):
    runs = [queued(runtime) for _ in range(3)]
    done = completed(runtime)
    url = f"{CHANGELIST}?status__exact=queued"
    page = op_client.post(url, bulk(runs[:1], select_across="1", index="0"))
    assert page.context["summary"] == "3 runs will be cancelled."
    assert 'name="select_across" value="1"' in page.content.decode()
    response = op_client.post(url, bulk(runs[:1], select_across="1", post="yes"), follow=True)
    assert shown(response) == [(messages.SUCCESS, "3 runs cancelled.")]
    assert {row(r).status for r in runs} == {RunStatus.CANCELLED}
    assert row(done).status == RunStatus.COMPLETED


def test_bad_input_is_refused_clearly_and_changes_nothing(op_client, runtime):
    run_id = queued(runtime)
    response = op_client.post(CHANGELIST, bulk([run_id, "1; drop table"], post="yes"), follow=True)
    assert shown(response) == [(messages.ERROR, "Not a run id: '1; drop table'. Nothing was changed.")]
    response = op_client.post(CHANGELIST, bulk([run_id], post="yes", reason="x" * 1001))
    assert response.status_code == 200 and response.context["form"].errors["reason"]
    assert row(run_id).status == RunStatus.QUEUED


@pytest.mark.django_db(transaction=True)  # the run executes in another thread, on its own connection
def test_bulk_cancel_stops_an_executing_run_and_its_page_shows_the_record(client, django_user_model, runtime):
    operator = django_user_model.objects.create_superuser("op", "op@example.com", "pw")
    client.force_login(operator)
    done = completed(runtime)
    live = InThread(runtime, SLOW)
    response = client.post(CHANGELIST, bulk([live.run_id, done], post="yes", reason="runaway"), follow=True)
    result = live.join()
    assert shown(response) == [
        (
            messages.SUCCESS,
            "1 run cancelled, 1 run already finished. "
            "1 of them was executing: the step in flight is interrupted and recorded, then it stops.",
        )
    ]
    assert result.outcome == Outcome.CANCELLED
    run = row(live.run_id)
    assert run.status == RunStatus.CANCELLED and run.stopped_at is not None and run.cancelled_by == operator
    assert AgentRunEvent.objects.filter(run_id=done, kind="cancelled").count() == 0

    page = client.get(change_url(live.run_id))
    steps = page.context["timeline"]
    assert [s.kind for s in steps] == [e.kind for e in runtime.events(live.run_id)]
    assert steps[-1].kind == "cancelled"
    lines = dict(steps[-1].lines)
    assert lines["cancelled"] == "by op via admin" and lines["reason"] == "runaway"
    # The step before the cancel was cut short in flight (the usual case), or was the boundary.
    interrupted = runtime.events(live.run_id)[-1].payload.get("interrupted")
    wording = "interrupting step #{} in flight" if interrupted else "after step #{}"
    assert lines["stopped"] == wording.format(steps[-2].sequence)
    assert page.context["timeline_total"] == len(steps)
    html = page.content.decode()
    assert "by op via admin" in html and "runaway" in html and ">yes<" in html
    assert 'id="cancel-run-form"' not in html  # a cancelled run offers no cancel


# --- cancel from a run's page ----------------------------------------------------------------
def test_cancel_from_a_runs_page(op_client, operator, runtime):
    w = waiting(runtime)
    page = op_client.get(change_url(w))
    html = page.content.decode()
    assert 'id="cancel-run-form"' in html and f'action="{cancel_url(w)}"' in html
    assert "CHANGE_FORM-action" not in html  # no change-form action machinery (Django 6.1-only)
    pending = escape('write_note({"body": "126", "title": "Result"})')
    assert f'<div class="readonly">{pending}</div>' in html  # the calls awaiting a decision

    # The button posts to the run's cancel URL; the first post (or a GET) shows the confirmation.
    for confirm in (op_client.post(cancel_url(w)), op_client.get(cancel_url(w))):
        assert confirm.status_code == 200
        assert CONFIRMATION in [t.name for t in confirm.templates]
        assert [(run.pk, plan) for run, plan in confirm.context["rows"]] == [
            (w, "cancel: it is not executing and stops at once")
        ]
        assert confirm.context["summary"] == "1 run will be cancelled."
        body = confirm.content.decode()
        assert 'name="post" value="yes"' in body and 'name="reason"' in body and 'value="Yes, cancel"' in body
        assert 'name="csrfmiddlewaretoken"' in body and "admin/js/cancel.js" in body
        assert f'href="{change_url(w)}"' in body  # the breadcrumbs lead back to the run
    assert row(w).status == RunStatus.WAITING_FOR_APPROVAL

    response = op_client.post(cancel_url(w), {"post": "yes", "reason": "no notes today"}, follow=True)
    assert response.redirect_chain[-1][0] == change_url(w)
    assert shown(response) == [
        (messages.SUCCESS, f"Run {w} cancelled; it was waiting for approval and can no longer be approved.")
    ]
    run = row(w)
    assert (run.status, run.cancel_source, run.cancelled_by, run.cancel_reason) == (
        RunStatus.CANCELLED,
        CancelSource.ADMIN,
        operator,
        "no notes today",
    )
    html = response.content.decode()
    assert "no notes today" in html and 'id="cancel-run-form"' not in html

    before = snapshot(w)
    again = op_client.post(cancel_url(w), {"post": "yes"}, follow=True)
    assert shown(again) == [(messages.WARNING, f"Run {w} was already cancelled; nothing changed.")]
    assert snapshot(w) == before


def test_cancel_from_a_finished_runs_page_changes_nothing(op_client, runtime):
    done = completed(runtime)
    page = op_client.get(change_url(done))
    assert 'id="cancel-run-form"' not in page.content.decode()
    confirm = op_client.post(cancel_url(done))
    assert confirm.context["actionable"] is False and 'value="Yes, cancel"' not in confirm.content.decode()
    before = snapshot(done)
    response = op_client.post(cancel_url(done), {"post": "yes"}, follow=True)
    assert shown(response) == [(messages.WARNING, f"Run {done} had already finished (completed); nothing changed.")]
    assert snapshot(done) == before


def test_cancel_from_a_runs_page_refuses_bad_input_and_keeps_list_filters(op_client, runtime):
    run_id = queued(runtime)
    before = snapshot(run_id)
    unknown = uuid.uuid4()
    response = op_client.post(cancel_url(unknown), {"post": "yes"}, follow=True)
    assert response.redirect_chain[-1][0] == CHANGELIST
    assert shown(response) == [(messages.ERROR, f"Run {unknown} does not exist; nothing changed.")]
    response = op_client.post(cancel_url("1; drop table"), {"post": "yes"}, follow=True)
    assert response.redirect_chain[-1][0] == CHANGELIST
    assert shown(response) == [(messages.ERROR, "Not a run id: '1; drop table'. Nothing was changed.")]
    response = op_client.post(cancel_url(run_id), {"post": "yes", "reason": "x" * 1001})
    assert response.status_code == 200 and response.context["form"].errors["reason"]
    assert op_client.put(cancel_url(run_id)).status_code == 405
    assert snapshot(run_id) == before

    # From a filtered list, the run's page and its cancel keep the list's filters.
    filters = "_changelist_filters=status__exact%3Dqueued"
    page = op_client.get(f"{change_url(run_id)}?{filters}")
    assert f'action="{cancel_url(run_id)}?{filters}"' in page.content.decode()
    response = op_client.post(f"{cancel_url(run_id)}?{filters}", {"post": "yes"})
    assert response.status_code == 302 and response["Location"] == f"{change_url(run_id)}?{filters}"
    assert row(run_id).status == RunStatus.CANCELLED


@pytest.mark.django_db(transaction=True)  # the run executes in another thread, on its own connection
def test_cancel_from_the_page_of_an_executing_run(client, django_user_model, runtime):
    client.force_login(django_user_model.objects.create_superuser("op", "op@example.com", "pw"))
    live = InThread(runtime, SLOW)
    response = client.post(cancel_url(live.run_id), {"post": "yes"}, follow=True)
    assert live.join().outcome == Outcome.CANCELLED
    assert shown(response) == [
        (
            messages.SUCCESS,
            f"Run {live.run_id} cancelled; it was executing: the step in flight "
            "is interrupted and recorded, then it stops.",
        )
    ]
    assert row(live.run_id).stopped_at is not None


# --- the permission gate and CSRF --------------------------------------------------------------
def test_staff_without_the_cancel_permission_cannot_cancel(client, viewer, runtime):
    # Guards issue 9 finding 3: other users' runs need cancel_agentrun; the action is offered to
    # staff (they may cancel their own runs) but leaves others' runs alone.
    q, w = queued(runtime), waiting(runtime)
    before = {i: snapshot(i) for i in (q, w)}
    client.force_login(viewer)
    page = client.get(CHANGELIST)
    assert page.status_code == 200 and listed(page) == {q, w}
    response = client.post(CHANGELIST, bulk([q, w], post="yes"), follow=True)
    assert (
        messages.WARNING,
        "2 selected runs were left alone: they are not yours and you lack the cancel permission.",
    ) in shown(response)
    run_page = client.get(change_url(w))
    assert run_page.status_code == 200
    html = run_page.content.decode()
    assert 'id="cancel-run-form"' not in html and cancel_url(w) not in html
    for response in (
        client.get(cancel_url(w)),
        client.post(cancel_url(w)),
        client.post(cancel_url(w), {"post": "yes"}),
    ):
        assert response.status_code == 403
    assert {i: snapshot(i) for i in before} == before

    # The gate is the permission: granted, the same user cancels through the same requests.
    viewer.user_permissions.add(Permission.objects.get(codename="cancel_agentrun"))
    assert 'id="cancel-run-form"' in client.get(change_url(w)).content.decode()
    response = client.post(CHANGELIST, bulk([q], post="yes"), follow=True)
    assert shown(response) == [(messages.SUCCESS, "1 run cancelled.")]
    response = client.post(cancel_url(w), {"post": "yes"}, follow=True)
    assert shown(response) == [
        (messages.SUCCESS, f"Run {w} cancelled; it was waiting for approval and can no longer be approved.")
    ]


def test_csrf_is_enforced_on_the_confirmation_forms(operator, runtime):
    csrf_client = Client(enforce_csrf_checks=True)
    csrf_client.force_login(operator)
    q, w = queued(runtime), waiting(runtime)
    token = csrf_client.get(CHANGELIST).context["csrf_token"]
    page = csrf_client.post(CHANGELIST, bulk([q], index="0", csrfmiddlewaretoken=token))
    assert page.status_code == 200
    form_token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.content.decode()).group(1)

    assert csrf_client.post(CHANGELIST, bulk([q], post="yes")).status_code == 403
    assert csrf_client.post(cancel_url(w), {"post": "yes"}).status_code == 403
    assert csrf_client.post(cancel_url(w)).status_code == 403  # even the first post, from the run's page
    assert (row(q).status, row(w).status) == (RunStatus.QUEUED, RunStatus.WAITING_FOR_APPROVAL)

    response = csrf_client.post(CHANGELIST, bulk([q], post="yes", csrfmiddlewaretoken=form_token), follow=True)
    assert shown(response) == [(messages.SUCCESS, "1 run cancelled.")]
    assert row(q).status == RunStatus.CANCELLED

    run_page = csrf_client.get(change_url(w)).content.decode()
    page_token = re.search(
        r'id="cancel-run-form">\s*<input type="hidden" name="csrfmiddlewaretoken" value="([^"]+)"', run_page
    ).group(1)
    confirm = csrf_client.post(cancel_url(w), {"csrfmiddlewaretoken": page_token})
    assert confirm.status_code == 200 and CONFIRMATION in [t.name for t in confirm.templates]
    confirm_token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', confirm.content.decode()).group(1)
    response = csrf_client.post(cancel_url(w), {"post": "yes", "csrfmiddlewaretoken": confirm_token}, follow=True)
    assert shown(response) == [
        (messages.SUCCESS, f"Run {w} cancelled; it was waiting for approval and can no longer be approved.")
    ]
    assert row(w).status == RunStatus.CANCELLED


# --- a run's page: fields and timeline ---------------------------------------------------------
def test_run_page_shows_the_step_stream_as_a_timeline(op_client, operator, runtime):
    script = [
        CALCULATE[0],
        {"tool_calls": [{"name": "calculator", "arguments": {"expression": "1/0"}}]},
        NOTE[0],
        {"content": "The answer is 126.", "usage": {"prompt_tokens": 90, "completion_tokens": 6}},
    ]
    first = runtime.run({"prompt": "what is (17 + 25) * 3?", "tools": ["calculator", "write_note"], "script": script})
    assert first.status == RunStatus.WAITING_FOR_APPROVAL
    assert runtime.approve(first.run_id, True, by=operator).status == RunStatus.COMPLETED

    page = op_client.get(change_url(first.run_id))
    assert page.status_code == 200
    steps = page.context["timeline"]
    events = runtime.events(first.run_id)
    assert [(s.sequence, s.kind, s.round) for s in steps] == [(e.sequence, e.kind, e.round) for e in events]
    lines = [dict(s.lines) for s in steps]
    assert lines[0]["user"] == "what is (17 + 25) * 3?"
    assert lines[0]["tools offered"] == "calculator, write_note"
    assert lines[1]["tool call"] == 'calculator({"expression": "(17 + 25) * 3"})'
    assert lines[1]["usage"] == "42 prompt + 18 completion = 60 tokens"
    assert lines[2]["call"] == 'calculator({"expression": "(17 + 25) * 3"})'
    assert lines[2]["result"] == '{"expression": "(17 + 25) * 3", "value": 126}'
    tool_errors = [d["error"] for s, d in zip(steps, lines) if s.kind == "tool" and "error" in d]
    assert tool_errors == ["division by zero"]
    approval = next(d for s, d in zip(steps, lines) if s.kind == "approval")
    assert approval["decision"] == "approved by op"
    assert approval["call"] == 'write_note({"body": "126", "title": "Result"})'
    assert lines[-1]["content"] == "The answer is 126."
    assert all(s.duration_ms is not None for s in steps if s.kind in ("llm", "tool"))

    html = page.content.decode()
    assert f"Step stream ({len(events)} steps)" in html
    assert "42 prompt + 18 completion = 60 tokens" in html and "approved by op" in html
    assert "The answer is 126." in html and "division by zero" in html
    assert 'id="cancel-run-form"' not in html
    # Styles come from a static file (no inline <style>, so no CSP nonce tag on any Django version).
    assert f'href="{static("nrllm_agents/admin.css")}"' in html and finders.find("nrllm_agents/admin.css")


# --- the queue dashboard and notes -----------------------------------------------------------
def test_queue_dashboard_is_linked_and_shows_the_apps_queue(
    op_client, runtime, redis_url, settings, django_capture_on_commit_callbacks
):
    settings.REDIS_URL = redis_url
    settings.RQ_QUEUES = {"default": {"URL": redis_url, "DEFAULT_TIMEOUT": 360}}
    with django_capture_on_commit_callbacks(execute=True):
        run_id = queued(runtime)  # dispatched to Redis db 10; no worker runs, so the job waits there
    dashboard = reverse("django_rq:home")
    assert f'href="{dashboard}"' in op_client.get(CHANGELIST).content.decode()
    page = op_client.get(dashboard)
    assert page.status_code == 200
    assert [(q["name"], q["jobs"]) for q in page.context["queues"]] == [("default", 1)]
    jobs = op_client.get(reverse("django_rq:jobs", args=[0]))
    assert jobs.status_code == 200 and f"nrllm-run-{run_id}" in jobs.content.decode()
    op_client.logout()
    assert op_client.get(dashboard).status_code == 302


def test_notes_are_listed_read_only(op_client, operator, runtime):
    run_id = waiting(runtime)
    runtime.approve(run_id, True, by=operator)
    note = Note.objects.get(run_id=run_id)
    page = op_client.get(reverse("admin:nrllm_agents_note_changelist"))
    assert page.status_code == 200 and list(page.context["cl"].result_list) == [note]
    assert "Result" in page.content.decode()
    assert op_client.get(reverse("admin:nrllm_agents_note_add")).status_code == 403
    assert (
        op_client.post(
            reverse("admin:nrllm_agents_note_change", args=[note.pk]), {"title": "edited", "body": "x"}
        ).status_code
        == 403
    )
    assert Note.objects.get(pk=note.pk).title == "Result"
