"""The operator's console in a real browser (issue 26): live in every part while it matters,
readable at a glance. Screenshots go to ``artifacts/screenshots/console-*.png``."""

from __future__ import annotations

import json
import re
import time

import pytest
from playwright.sync_api import Page, expect

from nrllm_agents.models import AgentRun, Price, RunStatus
from nrllm_agents.money import amounts
from nrllm_agents.presentation.presenters import run_status_dict
from nrllm_agents.runtime.agent_runtime import AgentRuntime

from .conftest import PASSWORD
from .test_live_answer import ANSWER, writing
from .test_playground import dom_sequences, sign_in, start, stored_sequences

pytestmark = pytest.mark.django_db(transaction=True)  # the server is another process

ISO = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}")
ADMIN_COLUMNS = ["id", "status", "prompt", "owner", "tokens", "cost", "duration", "created"]


@pytest.fixture
def errors(page: Page) -> list[str]:
    """JavaScript errors of the page (uncaught, or logged as errors): none is expected."""
    seen: list[str] = []
    watch(page, seen)
    return seen


def watch(page: Page, seen: list[str]) -> None:
    """Collect ``page``'s script errors and failed requests (but the favicon, which there is none of)."""
    page.on("pageerror", lambda exc: seen.append(str(exc)))
    page.on(
        "console",
        lambda msg: (
            seen.append(msg.text) if msg.type == "error" and "Failed to load resource" not in msg.text else None
        ),
    )
    page.on(
        "response",
        lambda r: (
            seen.append(f"{r.status} {r.url}") if r.status >= 400 and not r.url.endswith("/favicon.ico") else None
        ),
    )


def visible_text(page: Page) -> str:
    return page.evaluate("() => document.body.innerText")


def number(text: str) -> int:
    return int(re.match(r"\d+", text.strip()).group())


def sign_in_admin(page: Page, base: str, django_user_model, path: str) -> None:
    django_user_model.objects.create_superuser("root", password=PASSWORD)
    page.goto(f"{base}/admin/login/?next={path}")
    page.fill("#id_username", "root")
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    # The page behind the sign-in, loaded whole: its stylesheets too, before a test measures it
    page.wait_for_url(lambda url: "/admin/login/" not in url)


def test_a_running_tool_shows_as_running_with_its_elapsed_time(page, live_url, alice, errors, screenshot):
    sign_in(page, live_url)
    script = json.dumps([{"tool_calls": [{"name": "sleep", "arguments": {"seconds": 5}}]}, {"content": "slept"}])
    run_id = start(page, script, ["sleep"])
    card = page.locator("#live-steps li[data-kind=tool-pending]")
    expect(card).to_be_visible()
    expect(card).to_contain_text("tool sleep")
    expect(card).to_contain_text("running")
    expect(card.locator("#stop-inline")).to_be_visible()  # Stop is there for a tool too
    elapsed = card.locator(".elapsed")
    first = elapsed.inner_text()
    page.wait_for_function(
        "t => { const e = document.querySelector('#live-steps .elapsed'); return e && e.textContent !== t; }", arg=first
    )
    assert re.fullmatch(r"\d+(\.\d+)? (ms|s)", elapsed.inner_text())
    expect(page.locator("#gantt-pending")).to_have_count(1)  # and in the picture, as a bar in flight
    screenshot(page, "console-tool-running")
    # From the keyboard the run's Cancel is a few Tabs away (the run comes before the form).
    page.evaluate("document.activeElement && document.activeElement.blur()")
    tabs = 0
    while tabs < 8 and page.evaluate("document.activeElement.id") != "cancel-button":
        page.keyboard.press("Tab")
        tabs += 1
    assert page.evaluate("document.activeElement.id") == "cancel-button" and tabs <= 6, tabs
    expect(page.locator("#st-status")).to_have_text("completed", timeout=15_000)
    expect(page.locator("#live-steps .pending")).to_have_count(0)
    expect(page.locator("#gantt-pending")).to_have_count(0)
    assert dom_sequences(page) == stored_sequences(run_id)
    # The final answer is shown once: in the outcome; its card links there.
    expect(page.locator("#outcome")).to_contain_text("slept")
    expect(page.locator("#steps > li.final-answer .see-answer")).to_be_visible()
    assert not ISO.search(visible_text(page)), "a raw ISO timestamp is visible"
    assert errors == []


def test_the_picture_and_the_spend_follow_an_answer_and_stop_shows_it_cut_short(
    page, live_url, alice, errors, screenshot
):
    # The scripted model has a price: the spend shows in money too (issue 24's prices).
    Price.objects.create(provider="scripted", model="scripted-demo", input_per_million=3, output_per_million=15)
    sign_in(page, live_url)
    run_id = start(page, writing(20, before=1), ["calculator"])
    page.evaluate("window.__samePage = true")  # survives only if nothing reloads the page
    page.wait_for_function(
        "() => ((document.querySelector('#live-steps .live-text') || {}).textContent || '').length > 10"
    )
    bar = page.locator("#gantt-pending")
    spend = page.locator("#st-tokens")
    width, tokens = float(bar.get_attribute("width")), spend.inner_text()
    assert "being written" in tokens and number(tokens) == 7  # the first round's recorded tokens
    page.wait_for_function(
        """([w, t]) => { const b = document.querySelector('#gantt-pending');
           const spend = document.querySelector('#st-tokens').textContent;
           return b && parseFloat(b.getAttribute('width')) > w && spend !== t; }""",
        arg=[width, tokens],
    )
    screenshot(page, "console-answer-streaming")

    clicked = time.monotonic()
    page.click("#stop-inline")
    expect(page.locator("#st-status")).to_have_text("cancelled", timeout=5_000)
    elapsed = time.monotonic() - clicked
    # the answer had 20 s to go: a stop in well under that cut it short (2 s: the browser, the
    # server and the stream on a loaded machine; the cancel itself takes milliseconds)
    assert elapsed < 2.0, elapsed
    expect(page.locator("#steps > li").last).to_have_attribute("data-kind", "cancelled")
    interrupted = page.locator("#steps > li.interrupted[data-kind=llm]")
    expect(interrupted).to_contain_text("cut short by the cancel")
    assert page.evaluate("window.__samePage") is True  # no reload
    partial = AgentRun.objects.get(pk=run_id).events.filter(kind="llm").order_by("sequence").last().payload["content"]
    assert partial and ANSWER.startswith(partial) and len(partial) < len(ANSWER)
    expect(interrupted).to_contain_text(partial)
    # The spend: tokens always (the estimated ones of the cut answer included); money when priced.
    run = AgentRun.objects.get(pk=run_id)
    expect(spend).to_have_text(str(run.total_tokens))
    assert run.total_tokens > 7
    cost = amounts.run_cost_text(run_status_dict(run)["cost"])
    assert cost.endswith("USD (estimated in part)"), cost  # the cut answer is priced from estimates
    expect(page.locator("#st-cost")).to_have_text(cost)
    expect(page.locator("#outcome")).to_contain_text(re.compile(r"at \d\d:\d\d:\d\d\.\d{3} UTC; stopped \d+ ms later"))
    screenshot(page, "console-stopped-mid-answer")
    assert not ISO.search(visible_text(page)), "a raw ISO timestamp is visible"
    assert errors == []


def test_a_long_run_can_be_filtered_to_its_tool_steps_and_a_bar_leads_to_its_step(
    page, live_url, alice, errors, screenshot
):
    turns = [
        {
            "tool_calls": [{"name": "calculator", "arguments": {"expression": f"{i} * 2"}}],
            "usage": {"prompt_tokens": 40 + i, "completion_tokens": 4},
        }
        for i in range(40)
    ]
    result = AgentRuntime().run(
        {"prompt": "count", "tools": ["calculator"], "max_iterations": 60, "script": turns + [{"content": "done"}]},
        owner=alice,
    )
    events = AgentRuntime().events(result.run_id)
    assert len(events) >= 120
    sign_in(page, live_url)
    page.goto(f"{live_url}/playground/runs/{result.run_id}/")
    page.select_option("#kind-filter", "tool")
    tools = sum(1 for e in events if e.kind == "tool")
    expect(page.locator("#steps > li:visible")).to_have_count(tools)
    assert set(page.locator("#steps > li:visible").evaluate_all("els => els.map(e => e.dataset.kind)")) == {"tool"}
    expect(page.locator("#steps-shown")).to_have_text(f"{tools} of {len(events)} steps shown")
    screenshot(page, "console-long-run-tool-steps")
    # A bar of the picture leads to its step, even one the filter hides.
    llm = next(e for e in events if e.kind == "llm")
    page.locator(f'#gantt a[href="#step-{llm.sequence}"]').focus()
    expect(page.locator("#tip")).to_be_visible()  # its tooltip shows on focus, not only on hover
    page.keyboard.press("Enter")
    expect(page.locator(f"#step-{llm.sequence}")).to_be_focused()
    expect(page.locator(f"#step-{llm.sequence}")).to_be_in_viewport()
    page.click("#collapse-all")
    expect(page.locator("#steps .step-body:visible")).to_have_count(0)
    assert page.locator("#steps .fork-form:visible").count() == 0  # fork actions are in the menus
    assert errors == []


def test_at_390_px_the_run_is_in_the_first_screen(browser_context, live_url, alice, screenshot):
    result = AgentRuntime().run({"prompt": "phone", "script": [{"content": "hello from a phone"}]}, owner=alice)
    context = browser_context(viewport={"width": 390, "height": 844}, color_scheme="dark")
    page = context.new_page()
    seen: list[str] = []
    watch(page, seen)
    sign_in(page, live_url)
    page.goto(f"{live_url}/playground/runs/{result.run_id}/")
    box = page.locator("#run-heading").bounding_box()
    assert box is not None and box["y"] < 844
    expect(page.locator("#outcome")).to_be_in_viewport()
    assert page.evaluate("() => document.documentElement.scrollWidth") <= 390
    # Keyboard: the first Tab reaches the skip link, which leads to the run.
    page.keyboard.press("Tab")
    expect(page.locator("a.skip")).to_be_focused()
    background = page.evaluate("() => getComputedStyle(document.body).backgroundColor")
    assert background != "rgb(255, 255, 255)" and background != "rgb(246, 247, 249)"  # dark mode
    screenshot(page, "console-390px-dark")
    context.close()
    assert seen == []


def test_the_admin_run_list_fits_1280_px_with_its_columns(page, live_url, alice, django_user_model, errors, screenshot):
    runtime = AgentRuntime()
    for i in range(3):
        runtime.run({"prompt": f"a long prompt number {i} " * 6, "script": [{"content": "ok"}]}, owner=alice)
    sign_in_admin(page, live_url, django_user_model, "/admin/nrllm_agents/agentrun/")
    expect(page.locator("#result_list")).to_be_visible()
    headers = [h.strip() for h in page.locator("#result_list thead th").all_inner_texts() if h.strip()]
    assert headers == [c.upper() for c in ADMIN_COLUMNS] or [h.lower() for h in headers] == ADMIN_COLUMNS
    # Nothing overflows: not the page, not the list's own scrolling box; every column is in view.
    widths = page.evaluate(
        """() => { const results = document.querySelector('#changelist .results');
           return [document.documentElement.scrollWidth, document.documentElement.clientWidth,
                   results.scrollWidth, results.clientWidth]; }"""
    )
    assert widths[0] <= widths[1] and widths[2] <= widths[3], widths
    for header in page.locator("#result_list thead th").all():
        box = header.bounding_box()
        assert box["x"] + box["width"] <= 1280, header.inner_text()
    expect(page.locator("#result_list .run-status.status-completed")).to_have_count(3)
    expect(page.locator("#totals-per-user")).to_contain_text("alice")
    expect(page.locator("#totals-per-day")).to_be_visible()
    assert not ISO.search(visible_text(page)), "a raw ISO timestamp is visible"
    screenshot(page, "console-admin-list-1280")

    run = AgentRun.objects.filter(status=RunStatus.COMPLETED).first()
    page.goto(f"{live_url}/admin/nrllm_agents/agentrun/{run.pk}/change/")
    summary = page.locator("#run-summary")
    expect(summary).to_be_visible()
    assert summary.bounding_box()["y"] < page.locator("#run-timeline").bounding_box()["y"]
    assert summary.bounding_box()["y"] < page.locator("fieldset.module").last.bounding_box()["y"]
    assert not ISO.search(visible_text(page)), "a raw ISO timestamp is visible"
    screenshot(page, "console-admin-run-page")
    assert errors == []


@pytest.mark.sqlite  # the SQLite tier's smoke of this surface
def test_the_admin_run_page_is_live(page, live_url, alice, django_user_model, errors, screenshot):
    sign_in(page, live_url)
    # 25 s: the admin's sign-in and first load come well before the answer, even on the SQLite
    # tier of a loaded CI machine (10 s was not always enough there)
    run_id = start(page, json.dumps([{"delay": 25, "content": "slow answer"}]), [])
    admin = page.context.new_page()
    sign_in_admin(admin, live_url, django_user_model, f"/admin/nrllm_agents/agentrun/{run_id}/change/")
    expect(admin.locator("#summary-status")).to_have_text("running")
    expect(admin.locator("#gantt-pending")).to_have_count(1)
    admin.evaluate("window.__samePage = true")
    expect(admin.locator("#summary-status")).to_have_text("completed", timeout=45_000)
    assert admin.evaluate("window.__samePage") is True  # no reload
    expect(admin.locator("#run-summary")).to_contain_text("slow answer")
    screenshot(admin, "console-admin-run-live")
    assert errors == []


def test_the_admin_run_page_keeps_its_live_section_through_failed_refreshes(
    page, live_url, alice, django_user_model, errors
):
    """A refresh answered by another page (what a lost session's redirect to the sign-in gives)
    changes nothing; once the stream has ended, the page is re-read until it shows the run
    settled. Before, such a refresh removed the summary, and the one after the end was the last."""
    sign_in(page, live_url)
    # 12 s: the admin's sign-in and first load, on a loaded machine, come well before the answer
    run_id = start(page, json.dumps([{"delay": 12, "content": "slow answer"}]), [])
    admin = page.context.new_page()
    path = f"/admin/nrllm_agents/agentrun/{run_id}/change/"
    sign_in_admin(admin, live_url, django_user_model, path)
    expect(admin.locator("#summary-status")).to_have_text("running")
    served: list[float] = []

    def another_page(route) -> None:
        served.append(time.monotonic())
        sign_in_page = "<html><body><form id=login-form></form></body></html>"
        route.fulfill(status=200, content_type="text/html", body=sign_in_page)

    admin.route(f"{live_url}{path}", another_page)

    def pumping(predicate, what: str) -> None:  # the sync API runs route handlers only while called
        deadline = time.monotonic() + 30
        while not predicate():
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            admin.wait_for_timeout(100)

    pumping(lambda: AgentRun.objects.get(pk=run_id).status == RunStatus.COMPLETED, "the run")
    settled = time.monotonic()
    pumping(lambda: [t for t in served if t > settled + 0.5][1:], "two refreshes after the end")
    expect(admin.locator("#summary-status")).to_have_text("running")  # kept: nothing was swapped
    admin.unroute(f"{live_url}{path}")
    expect(admin.locator("#summary-status")).to_have_text("completed", timeout=20_000)
    expect(admin.locator("#run-summary")).to_contain_text("slow answer")
