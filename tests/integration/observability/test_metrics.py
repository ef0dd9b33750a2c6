"""``GET /metrics``: who may read it, and what a completed, a cancelled and a failed run count."""

from __future__ import annotations

import pytest
from django.test import override_settings
from prometheus_client.parser import text_string_to_metric_families

from nrllm_agents import store
from nrllm_agents.models import AgentRun, CancelSource, RunStatus
from nrllm_agents.observability import collectors

pytestmark = pytest.mark.django_db

TOKEN = "s3cret-scrape-token"


def scrape(client, **headers) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of ``/metrics`` as ``{(name, sorted labels): value}``."""
    collectors._cache["data"] = None  # read the gauges afresh
    response = client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}", **headers)
    assert response.status_code == 200, response.content[:300]
    assert response["Content-Type"].startswith("text/plain; version=")
    samples = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return samples


def delta(after, before, name, **labels) -> float:
    key = (name, tuple(sorted(labels.items())))
    return after.get(key, 0.0) - before.get(key, 0.0)


@pytest.fixture
def token_settings(settings):
    settings.NRLLM_AGENTS = {**settings.NRLLM_AGENTS, "METRICS_TOKEN": TOKEN}


def test_metrics_are_closed_by_default(client, django_user_model):
    assert client.get("/metrics").status_code == 403
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer guess").status_code == 403
    user = django_user_model.objects.create_user("plain", password="pw")
    client.force_login(user)
    assert client.get("/metrics").status_code == 403


def test_staff_token_and_opt_in_localhost_may_read(client, settings, django_user_model):
    settings.NRLLM_AGENTS = {**settings.NRLLM_AGENTS, "METRICS_TOKEN": TOKEN}
    assert client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}").status_code == 200
    assert client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}x").status_code == 403
    assert client.get("/metrics").status_code == 403  # the test client is 127.0.0.1: not open by default
    with override_settings(NRLLM_AGENTS={**settings.NRLLM_AGENTS, "METRICS_ALLOW_LOCALHOST": True}):
        assert client.get("/metrics").status_code == 200
        assert client.get("/metrics", REMOTE_ADDR="203.0.113.9").status_code == 403
    staff = django_user_model.objects.create_user("ops", password="pw", is_staff=True)
    client.force_login(staff)
    assert client.get("/metrics").status_code == 200
    assert client.post("/metrics").status_code == 405


def test_completed_cancelled_and_failed_runs_are_counted(client, runtime, token_settings):
    before = scrape(client)
    completed = runtime.run(
        {
            "prompt": "ok",
            "tools": ["calculator"],
            "script": [
                {
                    "tool_calls": [{"name": "calculator", "arguments": {"expression": "1+1"}}],
                    "usage": {"prompt_tokens": 10, "completion_tokens": 5},
                },
                {"content": "2", "usage": {"prompt_tokens": 20, "completion_tokens": 2}},
            ],
        }
    )
    assert completed.status == RunStatus.COMPLETED

    def cancel_on_tool(step):
        if step["kind"] == "tool":
            runtime.cancel(step["run_id"], source=CancelSource.API, reason="metrics test")

    cancelled = runtime.run(
        {
            "prompt": "stop",
            "tools": ["calculator"],
            "script": [
                {
                    "tool_calls": [{"name": "calculator", "arguments": {"expression": "2+2"}}],
                    "usage": {"prompt_tokens": 7, "completion_tokens": 3},
                },
                {"content": "never"},
            ],
        },
        on_step=cancel_on_tool,
    )
    assert cancelled.status == RunStatus.CANCELLED
    failed = runtime.run(
        {
            "prompt": "fail",
            "tools": ["calculator"],
            "script": [{"tool_calls": [{"name": "calculator", "arguments": {"expression": "3"}}]}],
        }
    )  # then the script runs dry
    assert (failed.status, failed.termination_reason) == (RunStatus.FAILED, "provider_failed")
    # Queued runs stay queued here: the test's transaction never commits, so no job is sent.
    queued = [runtime.enqueue({"prompt": f"q{i}", "script": [{"content": "x"}]}) for i in range(2)]
    runtime.cancel(queued[0], source=CancelSource.CLI)
    after = scrape(client)

    assert delta(after, before, "nrllm_runs_started_total", mode="interactive", provider="scripted") == 3
    assert delta(after, before, "nrllm_runs_started_total", mode="queued", provider="scripted") == 2
    assert (
        delta(after, before, "nrllm_runs_finished_total", status="completed", reason="completed", provider="scripted")
        == 1
    )
    assert (
        delta(
            after, before, "nrllm_runs_finished_total", status="failed", reason="provider_failed", provider="scripted"
        )
        == 1
    )
    assert delta(after, before, "nrllm_runs_failed_total", reason="provider_failed", provider="scripted") == 1
    assert (
        delta(after, before, "nrllm_runs_cancelled_total", source="api", previous_status="running", provider="scripted")
        == 1
    )
    assert (
        delta(after, before, "nrllm_runs_cancelled_total", source="cli", previous_status="queued", provider="scripted")
        == 1
    )
    assert (
        delta(after, before, "nrllm_runs_finished_total", status="cancelled", reason="cancelled", provider="scripted")
        == 2
    )
    # Steps: four model answers (2 + 1 + 1), the failed call (recorded too) and three tool calls
    # (one per run), by registered names.
    assert delta(after, before, "nrllm_step_duration_seconds_count", kind="tool", tool="calculator") == 3
    assert delta(after, before, "nrllm_step_duration_seconds_count", kind="llm", tool="") == 5
    assert (
        delta(after, before, "nrllm_tokens_total", provider="scripted", model="scripted-demo", kind="prompt")
        == 10 + 20 + 7
    )
    assert (
        delta(after, before, "nrllm_tokens_total", provider="scripted", model="scripted-demo", kind="completion")
        == 5 + 2 + 3
    )
    assert delta(after, before, "nrllm_cancel_stop_seconds_count") == 1
    assert delta(after, before, "nrllm_boundary_write_seconds_count") >= 3 + 4 + 3
    assert delta(after, before, "nrllm_segments_total", role="interactive", outcome="cancelled") == 1
    # The state gauges are read from the database.
    for status in ("queued", "running", "waiting_for_approval"):
        assert after[("nrllm_runs_active", (("status", status),))] == AgentRun.objects.filter(status=status).count()
    assert after[("nrllm_runs_active", (("status", "queued"),))] == 1
    # Never a run id as a label.
    assert not any(str(r) in repr(after.keys()) for r in (completed.run_id, cancelled.run_id, failed.run_id))


def test_reaper_actions_and_lease_expired_gauge(client, runtime, token_settings, settings):
    from datetime import timedelta

    from django.utils import timezone

    run = store.begin(
        {"prompt": "lost", "provider": "scripted", "tools": []},
        claimed_by="worker:gone:1:x",
        lease_expires=timezone.now() - timedelta(seconds=5),
    )
    AgentRun.objects.filter(pk=run.pk).update(attempts=99)  # its budget is used: dead-lettered
    before = scrape(client)
    assert before[("nrllm_runs_lease_expired", ())] == 1
    report = runtime.reap()
    after = scrape(client)
    assert sum(report.dead_lettered.values()) == 1
    assert delta(after, before, "nrllm_reaper_actions_total", action="dead_lettered", reason="retries_exhausted") == 1
    assert delta(after, before, "nrllm_runs_failed_total", reason="retries_exhausted", provider="scripted") == 1
    assert delta(after, before, "nrllm_reaper_passes_total") == 1
    assert after[("nrllm_runs_lease_expired", ())] == 0


@pytest.mark.parametrize("refusal", [ConnectionError("queue down"), ValueError("refused for good")])
def test_enqueue_failures_and_outages_are_counted_apart(
    client, runtime, token_settings, monkeypatch, django_capture_on_commit_callbacks, refusal
):
    from nrllm_agents.executors import dispatch

    def refuse(*args, **kwargs):
        raise refusal

    monkeypatch.setattr(dispatch, "dispatch", refuse)
    before = scrape(client)
    with django_capture_on_commit_callbacks(execute=True):  # inside atomic(): settled and logged, not raised
        run_id = runtime.enqueue({"prompt": "q", "script": [{"content": "x"}]})
    after = scrape(client)
    outage = isinstance(refusal, ConnectionError)  # an outage leaves the run queued (issue 20 item 14)
    run = AgentRun.objects.get(pk=run_id)
    assert (run.status, run.termination_reason) == (("queued", "") if outage else ("failed", "enqueue_failed"))
    assert delta(after, before, "nrllm_enqueue_deferred_total") == int(outage)
    assert delta(after, before, "nrllm_enqueue_failures_total") == int(not outage)
    assert delta(after, before, "nrllm_runs_failed_total", reason="enqueue_failed", provider="scripted") == int(
        not outage
    )


def test_each_budget_s_spent_reserved_and_left_are_gauges_with_bounded_labels(client, token_settings, alice):
    from decimal import Decimal

    from nrllm_agents.models import Budget

    budget = Budget.objects.create(
        scope="user",
        user=alice,
        window="day",
        max_cost=Decimal("5"),
        spent_cost=Decimal("1.25"),
        reserved_cost=Decimal("0.5"),
    )
    samples = scrape(client)
    labels = {"budget": str(budget.pk), "scope": "user", "window": "day", "unit": "cost"}
    key = tuple(sorted(labels.items()))
    assert samples[("nrllm_budget_spent", key)] == 1.25
    assert samples[("nrllm_budget_reserved", key)] == 0.5
    assert samples[("nrllm_budget_left", key)] == 3.25
    tokens = tuple(sorted({**labels, "unit": "tokens"}.items()))
    assert ("nrllm_budget_left", tokens) not in samples  # no token ceiling: nothing is left to say
    assert not any("alice" in str(k) for k in samples)  # no names in the labels
