"""A run's timeline in a real browser (issue 15): the cancel marker of a cancelled run, and a
100+ step run that stays readable, on the playground and the admin page. Screenshots go to
``artifacts/screenshots/timeline-*.png``."""

from __future__ import annotations

import json

import pytest
from playwright.sync_api import Page, expect

from nrllm_agents.models import AgentRun
from nrllm_agents.runtime.agent_runtime import AgentRuntime

from .conftest import SCREENSHOTS
from .test_console import sign_in_admin
from .test_playground import sign_in, start, wait_steps

pytestmark = pytest.mark.django_db(transaction=True)  # the server is another process

SLEEPS = json.dumps(
    [
        {
            "delay": 0.2,
            "tool_calls": [{"name": "sleep", "arguments": {"seconds": 0.4}}],
            "usage": {"prompt_tokens": 20 + i, "completion_tokens": 5},
        }
        for i in range(12)
    ]
    + [{"content": "never"}]
)
GATED = json.dumps(
    [
        {
            "tool_calls": [{"name": "calculator", "arguments": {"expression": "6*7"}}],
            "usage": {"prompt_tokens": 12, "completion_tokens": 3},
        },
        {
            "delay": 0.2,
            "tool_calls": [{"name": "write_note", "arguments": {"title": "t", "body": "b"}}],
            "usage": {"prompt_tokens": 25, "completion_tokens": 7},
        },
        {"content": "noted"},
    ]
)


def boxes(page: Page, selector: str) -> list[dict]:
    return page.eval_on_selector_all(
        selector,
        """els => els.map(e => {
        const r = e.getBoundingClientRect();
        return {x: r.x, right: r.right, width: r.width, seq: Number(e.dataset.sequence ?? -1),
                title: (e.querySelector('title') || {}).textContent || ''};
    })""",
    )


def marker_x(page: Page, kind: str) -> float:
    return page.eval_on_selector(f"#gantt-{kind} line", "e => e.getBoundingClientRect().x")


def work_bars(page: Page) -> list[dict]:
    return sorted(
        boxes(page, "#gantt rect.bar-llm, #gantt rect.bar-tool, #gantt rect.bar-interrupted"), key=lambda b: b["seq"]
    )


def test_cancelled_runs_show_the_cancel_after_the_last_step(live_url, page, alice, screenshot):
    sign_in(page, live_url)
    # Cancelled while executing: only the step in flight (or the one starting as the cancel
    # committed) runs past the request, to its boundary; the stop follows it.
    run_id = start(page, SLEEPS, ["sleep"])
    wait_steps(page, 4)
    page.click("#cancel-button")
    expect(page.locator("#st-status")).to_have_text("cancelled", timeout=30_000)
    AgentRun.objects.get(pk=run_id, stopped_at__isnull=False)  # the stop is recorded: draw it
    page.goto(f"{live_url}/playground/runs/{run_id}/")
    expect(page.locator("#gantt-stop")).to_be_visible()
    screenshot(page, "timeline-cancelled-running")
    bars = work_bars(page)
    cancel_x, stop_x = marker_x(page, "cancel"), marker_x(page, "stop")
    last = bars[-1]
    assert sum(1 for b in bars if b["right"] > cancel_x + 1) <= 1, "more than one step ran past the cancel"
    assert stop_x >= last["right"] - 1 and stop_x >= cancel_x
    assert "#" in last["title"] and ("tool sleep" in last["title"] or "model call" in last["title"])

    # Cancelled while waiting for approval: the marker is after the last recorded step.
    page.goto(f"{live_url}/playground/")
    waiting_id = start(page, GATED, ["calculator", "write_note"])
    expect(page.locator("#approval")).to_be_visible(timeout=30_000)
    page.click("#cancel-button")
    expect(page.locator("#st-status")).to_have_text("cancelled", timeout=30_000)
    page.goto(f"{live_url}/playground/runs/{waiting_id}/")
    screenshot(page, "timeline-cancelled-waiting")
    bars = work_bars(page)
    assert marker_x(page, "cancel") > bars[-1]["right"]
    assert page.locator("#spend-total").inner_text() == str(12 + 3 + 25 + 7)


def test_a_long_run_stays_readable(live_url, page, browser_context, alice, django_user_model, screenshot):
    turns = [
        {
            "tool_calls": [{"name": "calculator", "arguments": {"expression": f"{i} * 2"}}],
            "usage": {"prompt_tokens": 40 + 3 * i, "completion_tokens": 4},
        }
        for i in range(40)
    ]
    result = AgentRuntime().run(
        {"prompt": "count", "tools": ["calculator"], "max_iterations": 60, "script": turns + [{"content": "done"}]},
        owner=alice,
    )
    steps = AgentRuntime().events(result.run_id)
    assert len(steps) > 100
    sign_in(page, live_url)
    page.goto(f"{live_url}/playground/runs/{result.run_id}/")
    screenshot(page, "timeline-long-run-playground")
    _assert_readable(page, work_steps=sum(1 for e in steps if e.kind in ("llm", "tool")))

    admin = browser_context().new_page()
    sign_in_admin(admin, live_url, django_user_model, f"/admin/nrllm_agents/agentrun/{result.run_id}/change/")
    expect(admin.locator("#gantt")).to_be_visible()
    screenshot(admin, "timeline-long-run-admin")
    admin.locator("#run-picture").screenshot(path=str(SCREENSHOTS / "timeline-long-run-admin-strip.png"))
    _assert_readable(admin, work_steps=sum(1 for e in steps if e.kind in ("llm", "tool")))

    # The operations page, linked from the runs list, counts what the database holds.
    admin.goto(f"{live_url}/admin/nrllm_agents/agentrun/")
    admin.click("#operations-link")
    expect(admin.locator("#ops-status")).to_be_visible()
    screenshot(admin, "operations-page")
    shown = admin.eval_on_selector_all(
        "#ops-status a[data-status]", "els => Object.fromEntries(els.map(e => [e.dataset.status, +e.textContent]))"
    )
    assert shown == {s: AgentRun.objects.filter(status=s).count() for s in shown}
    # the ended runs are counted among those created in the last 24 hours (issue 45): all of these
    ended = admin.eval_on_selector_all(
        "#ops-status a[data-recent-status]",
        "els => Object.fromEntries(els.map(e => [e.dataset.recentStatus, +e.textContent]))",
    )
    assert ended == {s: AgentRun.objects.filter(status=s).count() for s in ended} and ended["completed"] == 1


def _assert_readable(page: Page, work_steps: int) -> None:
    bars = work_bars(page)
    assert len(bars) == work_steps
    assert all(b["width"] >= 1 for b in bars), "a step is too thin to see"
    svg = page.eval_on_selector("#gantt", "e => e.getBoundingClientRect().toJSON()")
    assert svg["right"] <= page.viewport_size["width"], "the strip overflows the page"
    assert all(svg["x"] <= b["x"] and b["right"] <= svg["right"] + 0.5 for b in bars)
    ticks = boxes(page, "#gantt .tick-label")
    assert 3 <= len(ticks) <= 12
    assert all(a["right"] <= b["x"] for a, b in zip(ticks, ticks[1:])), "axis labels overlap"
    lanes = page.eval_on_selector_all("#gantt .lane-label", "els => els.map(e => e.textContent)")
    assert {"model", "tool calculator"} <= set(lanes)
    assert page.locator("#spend .spend-round").count() == 41  # every round, the last reported 0 tokens
