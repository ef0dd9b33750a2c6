"""The runs admin at a glance (issue 26): the list's columns, the totals of the listed runs per
day and per user, and a run's summary (PostgreSQL and SQLite)."""

from __future__ import annotations

import re

import pytest
from django.contrib.admin.utils import label_for_field
from django.urls import reverse

from nrllm_agents.admin import columns
from nrllm_agents.models import AgentRun, AgentRunEvent, CancelSource
from tests.integration.web.test_console_pages import ISO, visible

from .test_runs import CHANGELIST, op_client, operator  # noqa: F401

pytestmark = pytest.mark.django_db

SPEND = [{"content": "ok", "usage": {"prompt_tokens": 30, "completion_tokens": 12}}]


def test_the_list_shows_its_columns_and_the_totals_of_the_listed_runs(op_client, runtime, alice, bob):
    from nrllm_agents.models import Price

    # 30 tokens in at 1 and 12 out at 2 per million: 0.000054 a run, exactly.
    Price.objects.create(provider="scripted", model="scripted-demo", input_per_million=1, output_per_million=2)
    for owner, n in ((alice, 2), (bob, 1)):
        for i in range(n):
            runtime.run({"prompt": f"spend {owner.username} {i}", "script": SPEND}, owner=owner)
    response = op_client.get(CHANGELIST)
    html = response.content.decode()
    changelist = response.context["cl"]
    headers = [label_for_field(name, AgentRun, changelist.model_admin) for name in changelist.list_display[1:]]
    assert headers == ["id", "status", "prompt", "owner", "tokens", "cost", "duration", "created"]
    assert html.count('class="run-status status-completed"') == 3
    totals = response.context["totals"]
    assert (totals["all"]["n_runs"], totals["all"]["tokens"]) == (3, 3 * 42)
    per_user = {row["owner__username"]: (row["n_runs"], row["tokens"]) for row in totals["per_user"]}
    assert per_user == {"alice": (2, 84), "bob": (1, 42)}
    assert [row["n_runs"] for row in totals["per_day"]] == [3]
    assert totals["all"]["cost"] == "0.000162 USD"
    assert html.count("0.000054 USD") >= 3  # each run's cost column
    # The totals follow the list's search and filters.
    searched = op_client.get(CHANGELIST, {"q": "spend bob"}).context["totals"]
    assert (searched["all"]["n_runs"], searched["all"]["tokens"]) == (1, 42)
    assert not ISO.search(visible(html)), ISO.search(visible(html))


def test_a_runs_page_starts_with_its_summary(op_client, runtime, alice):
    def observe(step):
        if step["kind"] == "llm":
            runtime.cancel(step["run_id"], by=alice, source=CancelSource.API)

    script = [{"tool_calls": [{"name": "calculator", "arguments": {"expression": "1"}}]}, {"content": "x"}]
    result = runtime.run({"prompt": "p", "tools": ["calculator"], "script": script}, owner=alice, on_step=observe)
    html = op_client.get(reverse("admin:nrllm_agents_agentrun_change", args=[result.run_id])).content.decode()
    assert html.index('id="run-summary"') < html.index('id="run-timeline"') < html.index("Cancel record")
    assert re.search(r"Cancelled by alice via api at \d\d:\d\d:\d\d\.\d{3} UTC; stopped \d+ ms later\.", html)
    assert 'data-live="false"' in html and "admin_live.js" in html
    assert reverse("nrllm_web:run", args=[result.run_id]) in html


def test_a_failed_model_call_is_a_failed_step_on_every_page(op_client, runtime, alice, client):
    result = runtime.run({"prompt": "p", "script": [{"content": "x"}]}, owner=alice)
    run = AgentRun.objects.get(pk=result.run_id)
    # The shape the loop records when the provider fails (a fixture row: the loop's own test is elsewhere).
    AgentRunEvent.objects.create(
        run=run, sequence=run.events.count(), kind="llm", round=2, payload={"error": "ProviderError: HTTP 502"}
    )
    admin = op_client.get(reverse("admin:nrllm_agents_agentrun_change", args=[run.pk])).content.decode()
    assert 'class="step-llm step-failed"' in admin and "ProviderError: HTTP 502" in admin
    client.force_login(alice)
    page = client.get(reverse("nrllm_web:run", args=[run.pk])).content.decode()
    assert 'class="step kind-llm failed"' in page and ">model failed<" in page
    picture = client.get(reverse("nrllm_web:run-picture", args=[run.pk])).content.decode()
    assert 'class="bar bar-error"' in picture and "failed: ProviderError: HTTP 502" in picture


def test_durations_and_times_read_for_people():
    assert columns.span(None, None) == "-"
    from datetime import timedelta

    from django.utils import timezone

    now = timezone.now()
    assert columns.span(now - timedelta(milliseconds=830), now) == "830 ms"
    assert columns.span(now - timedelta(seconds=2.414), now) == "2.41 s"
    assert columns.ago(now - timedelta(minutes=5), now) == "5 min ago"
    assert 'title="' in columns.when(now) and ">just now</time>" in columns.when(now)


def test_the_rows_checkbox_is_the_widgets_markup_written_at_once(op_client, runtime, alice):
    """The list writes each row's checkbox with one ``format_html`` instead of rendering Django's
    widget template per row; the markup is the same, so the admin's actions script finds it."""
    from django.contrib import admin as django_admin

    result = runtime.run({"prompt": "p", "script": [{"content": "x"}]}, owner=alice)
    run = AgentRun.objects.get(pk=result.run_id)
    model_admin = django_admin.site._registry[AgentRun]
    assert model_admin.action_checkbox(run) == django_admin.ModelAdmin.action_checkbox(model_admin, run)
    html = op_client.get(CHANGELIST).content.decode()
    assert f'name="_selected_action" value="{run.pk}" class="action-select"' in html
