"""The admin's operations page: its figures match the database and Redis, and each links to
exactly those runs in the runs list."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from nrllm_agents import store
from nrllm_agents.executors import dispatch
from nrllm_agents.models import ACTIVE, TERMINAL, AgentRun, CancelSource, RunStatus

pytestmark = pytest.mark.django_db

URL = "/admin/nrllm_agents/agentrun/operations/"
CHANGELIST = "/admin/nrllm_agents/agentrun/"


@pytest.fixture
def staff_client(client, django_user_model):
    client.force_login(django_user_model.objects.create_superuser("ops", password="pw"))
    return client


@pytest.fixture
def rq(settings, redis_url):
    settings.REDIS_URL = redis_url
    settings.RQ_QUEUES = {"default": {"URL": redis_url}}


def figures(html: str, attribute: str) -> dict[str, int]:
    return {m[0]: int(m[1]) for m in re.findall(rf'data-{attribute}="([^"]+)" data-count="(\d+)"', html)}


def listed(client, query: str) -> set[str]:
    html = client.get(f"{CHANGELIST}?{query}").content.decode()
    return set(re.findall(r'name="_selected_action" value="([0-9a-f-]{36})"', html))


def make_runs(runtime) -> dict[str, list]:
    past = timezone.now() - timedelta(minutes=5)
    fields = {"prompt": "p", "provider": "scripted", "tools": []}
    made: dict[str, list] = {"no_job": [], "with_job": [], "expired": [], "orphan": []}
    for _ in range(3):  # queued, and their job was never sent (the test transaction never commits)
        made["no_job"].append(store.create_queued(dict(fields), {"prompt": "p"}).pk)
    for _ in range(2):  # queued with a live job in Redis
        run = store.create_queued(dict(fields), {"prompt": "p"})
        dispatch.dispatch(run.pk)
        made["with_job"].append(run.pk)
    for _ in range(2):  # running, its worker gone
        made["expired"].append(store.begin(dict(fields), claimed_by="worker:gone:1:a", lease_expires=past).pk)
    store.begin(dict(fields), claimed_by="worker:alive:1:b", lease_expires=timezone.now() + timedelta(minutes=5))
    orphan = store.begin(dict(fields), claimed_by="worker:gone:2:c", lease_expires=past)
    runtime.cancel(orphan.pk, source=CancelSource.SYSTEM)  # cancelled while running; nobody acknowledged
    made["orphan"].append(orphan.pk)
    runtime.run({"prompt": "done", "script": [{"content": "ok"}]})
    runtime.run(
        {
            "prompt": "bad",
            "tools": ["calculator"],
            "script": [{"tool_calls": [{"name": "calculator", "arguments": {"expression": "1"}}]}],
        }
    )
    return made


def test_operations_counts_match_the_database_and_link_to_the_runs(staff_client, runtime, rq):
    made = make_runs(runtime)
    html = staff_client.get(URL).content.decode()
    by_status = figures(html, "status")
    assert by_status == {s: AgentRun.objects.filter(status=s).count() for s in ACTIVE}
    assert by_status["queued"] == 5 and by_status["running"] == 3
    recent = figures(html, "recent-status")
    assert recent == {s: AgentRun.objects.filter(status=s).count() for s in TERMINAL}
    assert recent["failed"] == 1 and recent["cancelled"] == 1
    stuck = figures(html, "stuck")
    now = timezone.now()
    assert stuck["lease_expired"] == AgentRun.objects.filter(status="running", lease_expires__lt=now).count() == 2
    assert stuck["unacknowledged_cancel"] == 1
    assert stuck["queued_without_job"] == 3
    queue = figures(html, "queue")
    assert queue["waiting"] == 2
    assert "The reaper has never run" in html

    # Each figure links to exactly those runs.
    assert listed(staff_client, "health=queued_without_job") == {str(pk) for pk in made["no_job"]}
    assert listed(staff_client, "health=lease_expired") == {str(pk) for pk in made["expired"]}
    assert listed(staff_client, "health=unacknowledged_cancel") == {str(pk) for pk in made["orphan"]}
    assert len(listed(staff_client, "status__exact=queued")) == 5
    for query in ("health=queued_without_job", "health=lease_expired", "status__exact=queued"):
        assert f'href="{CHANGELIST}?{query}"' in html

    # A reaper pass is remembered and shown; afterwards nothing is stuck on leases any more.
    report = runtime.reap()
    html = staff_client.get(URL).content.decode()
    assert f"{len(report.requeued)} requeued" in html and "ago" in html
    stuck = figures(html, "stuck")
    assert stuck["lease_expired"] == 0 and stuck["unacknowledged_cancel"] == 0
    # The requeued runs got live jobs (their next segment's job id); only the first three lack one.
    assert figures(html, "stuck")["queued_without_job"] == 3


def test_the_status_counts_read_the_active_runs_and_a_day_of_ended_ones_not_the_whole_history(
    staff_client, runtime, settings
):
    """Issue 45: no GROUP BY over every run ever recorded (245 ms at a million runs). The active
    runs are counted whole; the ended ones among the last 24 hours' runs, and the page says so."""
    settings.REDIS_URL = None
    runtime.run({"prompt": "today", "script": [{"content": "ok"}]})
    old = runtime.run({"prompt": "last week", "script": [{"content": "ok"}]})
    AgentRun.objects.filter(pk=old.run_id).update(created_at=timezone.now() - timedelta(days=7))  # a fixture
    store.create_queued({"prompt": "p", "provider": "scripted", "tools": []}, {"prompt": "p"})
    sqls: list[tuple[str, list]] = []
    with connection.execute_wrapper(
        lambda execute, sql, params, *a: sqls.append((sql, list(params or ()))) or execute(sql, params, *a)
    ):
        html = staff_client.get(URL).content.decode()
    assert figures(html, "status")["queued"] == 1
    assert figures(html, "recent-status")["completed"] == 1  # today's run, not last week's
    assert "Ended, of the runs created in the last 24 hours" in html
    since = re.search(r'data-recent-status="completed"', html) and re.search(r"created_at__gte=([^\"]+)\"", html)
    assert since and len(listed(staff_client, f"status__exact=completed&created_at__gte={since[1]}")) == 1

    run_table = [(sql, params) for sql, params in sqls if 'FROM "nrllm_agents_agentrun"' in sql]
    assert run_table, "the page reads the run table"
    # Each bounded by an index that holds few runs at any size: the active statuses, the runs not
    # stopped (the partial index agentrun_unstopped), a day of created_at, or a LIMIT.
    for sql, params in run_table:
        statuses = {p for p in params if p in RunStatus.values}  # (SQLite passes times as strings)
        window = '"created_at" >=' in sql or '"stopped_at" IS NULL' in sql
        assert " WHERE " in sql and ((statuses and statuses <= ACTIVE) or window or " LIMIT " in sql), (sql, params)
        assert not statuses & TERMINAL or window, (sql, params)


def test_without_redis_the_page_says_what_it_cannot_know(staff_client, runtime, settings):
    settings.REDIS_URL = None
    store.create_queued({"prompt": "p", "provider": "scripted", "tools": []}, {"prompt": "p"})
    html = staff_client.get(URL).content.decode()
    assert figures(html, "status")["queued"] == 1
    assert "not knowable without RQ" in html and "queued_without_job" not in figures(html, "stuck")


def test_redis_down_is_a_message_not_an_error(staff_client, settings):
    settings.REDIS_URL = "redis://127.0.0.1:1/0"
    settings.RQ_QUEUES = {"default": {"URL": "redis://127.0.0.1:1/0"}}
    store.create_queued({"prompt": "p", "provider": "scripted", "tools": []}, {"prompt": "p"})
    response = staff_client.get(URL)
    assert response.status_code == 200 and "Redis unreachable" in response.content.decode()
    assert staff_client.get(f"{CHANGELIST}?health=queued_without_job").status_code == 200


def test_only_staff_with_view_permission(client, alice):
    assert client.get(URL).status_code == 302  # to the admin login
    client.force_login(alice)
    assert client.get(URL).status_code == 302
