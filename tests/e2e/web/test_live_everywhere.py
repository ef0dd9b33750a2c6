"""The console, live everywhere and calm (issue 35), in Debian's Chromium against a real server:
an MCP tool's progress on the running cards, an admin run page that keeps up without a reload,
an operator's cancel that reads as a decision. Screenshots: ``artifacts/screenshots/live-*.png``."""

from __future__ import annotations

import json
import re
import time
from datetime import UTC, datetime

import pytest
from django.utils import timezone
from playwright.sync_api import Page, expect

from nrllm_agents.models import AgentRun, Price, RunStatus
from nrllm_agents.testing import mcp_servers
from nrllm_agents.web.display import absolute, duration

from .test_console import errors, number, sign_in_admin, watch  # noqa: F401  (a fixture)
from .test_playground import sign_in, start

pytestmark = pytest.mark.django_db(transaction=True)  # the server is another process

TOOL = "everything__trigger-long-running-operation"
# An element wider than its box: it scrolls sideways.
SCROLLS = "s => { const e = document.querySelector(s); return !!e && e.scrollWidth > e.clientWidth; }"


@pytest.fixture
def mcp_url(server_env, tmp_path):
    """The app under ``runserver`` with server-everything configured over stdio."""
    from .servers import serve

    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {"everything": mcp_servers.everything()}}))
    with serve("runserver", {**server_env, "NRLLM_MCP_CONFIG": str(config)}, tmp_path) as base:
        yield base


def wait_for_tool(page: Page, name: str) -> None:
    """The form offers an MCP server's tools once the server's background listing is in."""
    deadline = time.monotonic() + 30
    while not page.locator(f"input[name=tools][value='{name}']").count():
        assert time.monotonic() < deadline, f"{name} never offered"
        time.sleep(0.5)
        page.reload()


def test_mcp_progress_shows_live_on_the_playground_and_admin_tool_cards(
    page, mcp_url, alice, django_user_model, errors, screenshot
):
    sign_in(page, mcp_url)
    wait_for_tool(page, TOOL)
    script = json.dumps(
        [{"tool_calls": [{"name": TOOL, "arguments": {"duration": 12, "steps": 24}}]}, {"content": "ok"}]
    )
    run_id = start(page, script, [TOOL])
    card = page.locator("#live-steps li[data-kind=tool-pending]")
    expect(card).to_contain_text(f"tool {TOOL}")
    progress = card.locator(".tool-progress")
    expect(progress).to_contain_text(re.compile(r": \d+ / 24"))  # "7 / 24" while it runs
    expect(progress.locator("progress")).to_have_attribute("max", "24")
    first = number(progress.get_attribute("data-progress"))
    page.wait_for_function(
        "n => Number(document.querySelector('#live-steps .tool-progress').dataset.progress) > n", arg=first
    )
    assert AgentRun.objects.get(pk=run_id).status == RunStatus.RUNNING
    screenshot(page, "live-playground-mcp-progress")

    admin = page.context.new_page()
    watch(admin, errors)
    sign_in_admin(admin, mcp_url, django_user_model, f"/admin/nrllm_agents/agentrun/{run_id}/change/")
    running = admin.locator("#running-card")
    expect(running).to_contain_text(f"tool {TOOL}")
    expect(running.locator("#running-progress")).to_contain_text(re.compile(r": \d+ / 24"))
    expect(running.locator("#running-stop")).to_be_visible()  # a superuser may cancel
    screenshot(admin, "live-admin-mcp-progress")
    expect(admin.locator("#summary-status")).to_have_text("completed", timeout=30_000)
    expect(admin.locator("#running-card")).to_have_count(0)
    assert errors == []


def test_the_admin_run_page_counts_tokens_live_and_settles_without_a_reload(
    browser_context, live_url, alice, django_user_model, screenshot
):
    Price.objects.create(provider="scripted", model="scripted-demo", input_per_million=3, output_per_million=15)
    page = browser_context(timezone_id="UTC").new_page()
    errors: list[str] = []
    watch(page, errors)
    sign_in(page, live_url)
    script = [
        {
            # long enough for the admin's sign-in under a loaded CI (6 s was not)
            "tool_calls": [{"name": "sleep", "arguments": {"seconds": 12}}],
            "usage": {"prompt_tokens": 900, "completion_tokens": 60},
        },
        {"content": "slept", "usage": {"prompt_tokens": 1000, "completion_tokens": 20}},
    ]
    run_id = start(page, json.dumps(script), ["sleep"])
    admin = page.context.new_page()
    watch(admin, errors)
    sign_in_admin(admin, live_url, django_user_model, f"/admin/nrllm_agents/agentrun/{run_id}/change/")
    admin.evaluate("window.__samePage = true")
    expect(admin.locator("#summary-status")).to_have_text("running")
    expect(admin.locator("#summary-tokens")).to_contain_text("960")  # the first answer's, before the run settles
    assert AgentRun.objects.get(pk=run_id).status == RunStatus.RUNNING
    expect(admin.locator("#summary-cost")).to_contain_text("so far")
    expect(admin.locator("#summary-cost")).to_contain_text("per million tokens")  # the price in force
    running = admin.locator("#running-card")
    expect(running).to_contain_text("tool sleep")
    expect(running.locator("#running-stop")).to_be_visible()
    expect(admin.locator("#content .titles")).to_contain_text("running")
    expect(admin.locator("#cancel-run-form")).to_have_count(1)
    screenshot(admin, "live-admin-running")

    expect(admin.locator("#summary-status")).to_have_text("completed", timeout=20_000)
    expect(admin.locator("#content .titles")).not_to_contain_text("running")
    expect(admin.locator(".breadcrumbs")).not_to_contain_text("running")
    expect(admin.locator("#cancel-run-form")).to_have_count(0)  # no Cancel on a settled run
    expect(admin.locator("#running-card")).to_have_count(0)
    expect(admin.locator("#summary-tokens")).to_contain_text("1980")
    assert "running" not in admin.title()
    # The one duration format, the same in the browser as on the server (web/display.duration).
    samples = [340, 2410, 125_000, 3_600_000, 3_900_000]
    assert admin.evaluate("ms => ms.map(window.nrllmConsole.duration)", samples) == [duration(ms) for ms in samples]
    # ... and the one instant format (the browser's zone here is UTC, as the server's).
    instant = admin.evaluate("() => window.nrllmConsole.absolute(new Date('2026-12-03T13:17:49Z'))")
    with timezone.override("UTC"):
        assert instant == absolute(datetime(2026, 12, 3, 13, 17, 49, tzinfo=UTC)) == "3 Dec 2026, 13:17:49 UTC"
    assert admin.evaluate("window.__samePage") is True  # no reload
    screenshot(admin, "live-admin-settled")
    assert errors == []


def test_an_interrupted_tool_reads_as_a_decision_not_an_error(
    page, live_url, alice, django_user_model, errors, screenshot
):
    sign_in(page, live_url)
    script = json.dumps([{"tool_calls": [{"name": "sleep", "arguments": {"seconds": 30}}]}, {"content": "never"}])
    run_id = start(page, script, ["sleep"])
    expect(page.locator("#live-steps li[data-kind=tool-pending]")).to_be_visible()
    page.click("#stop-inline")
    expect(page.locator("#st-status")).to_have_text("cancelled", timeout=15_000)
    tool = page.locator("#steps > li[data-kind=tool]")
    expect(tool).to_have_class(re.compile(r"\binterrupted\b"))
    expect(tool).not_to_have_class(re.compile(r"\bfailed\b"))
    expect(tool.locator(".badge.interrupted")).to_have_text("interrupted by cancel")
    expect(tool.locator(".cancel-who")).to_have_text("by alice via playground")  # live, and who
    expect(page.locator("#steps .badge.failed")).to_have_count(0)
    assert "tool error" not in tool.inner_text()
    expect(page.locator("rect.bar-interrupted")).to_have_count(1)
    fill = page.locator("rect.bar-interrupted").evaluate("r => getComputedStyle(r).fill")
    assert fill != "rgb(217, 83, 79)", fill  # not the error red
    screenshot(page, "live-interrupted-tool")
    page.reload()  # the page the server renders says the same
    expect(page.locator("#steps > li[data-kind=tool] .cancel-who")).to_have_text("by alice via playground")

    sign_in_admin(page, live_url, django_user_model, f"/admin/nrllm_agents/agentrun/{run_id}/change/")
    row = page.locator("#run-timeline tr.step-tool")
    expect(row).to_have_class(re.compile(r"\bstep-interrupted\b"))
    expect(row).not_to_have_class(re.compile(r"\bstep-failed\b"))
    expect(row.locator(".cancelled-mark")).to_have_text("interrupted by cancel")
    expect(row.locator(".cancel-who")).to_have_text("by alice via playground")
    expect(page.locator("#run-timeline .failed-mark")).to_have_count(0)
    screenshot(page, "live-admin-interrupted-tool")
    assert errors == []


def test_the_new_elements_at_390_px_in_dark_mode(browser_context, live_url, alice, django_user_model, screenshot):
    context = browser_context(viewport={"width": 390, "height": 844}, color_scheme="dark")
    page = context.new_page()
    sign_in(page, live_url)
    script = json.dumps([{"tool_calls": [{"name": "sleep", "arguments": {"seconds": 8}}]}, {"content": "ok"}])
    run_id = start(page, script, ["sleep"])
    expect(page.locator("#live-steps li[data-kind=tool-pending]")).to_be_visible()
    strip = page.locator("#run-picture")
    # wider than the phone: it scrolls (waited for: the live page redraws the strip as steps come)
    page.wait_for_function(SCROLLS, arg="#run-picture")
    expect(strip.locator(".scroll-cue")).to_be_visible()  # and says so
    screenshot(page, "live-390-dark-playground")
    admin = context.new_page()
    sign_in_admin(admin, live_url, django_user_model, f"/admin/nrllm_agents/agentrun/{run_id}/change/")
    card = admin.locator("#running-card")
    expect(card).to_be_visible()
    box = card.bounding_box()
    assert box["x"] >= 0 and box["x"] + box["width"] <= 390 + 1, box  # no sideways scroll for the card
    background = card.evaluate("e => getComputedStyle(e).backgroundColor")
    assert background == "rgb(31, 42, 64)", background  # the dark variant
    picture = admin.locator("#run-timeline .run-picture")
    admin.wait_for_function(SCROLLS, arg="#run-timeline .run-picture")  # the timeline scrolls, visibly
    expect(picture.locator(".scroll-cue")).to_be_visible()
    screenshot(admin, "live-390-dark-admin")
    context.close()


def test_conversations_read_like_a_chat_with_titles_spend_and_an_interrupted_turn(page, live_url, alice, screenshot):
    from .test_thread_chat import ANSWER, send

    Price.objects.create(provider="scripted", model="scripted-demo", input_per_million=3, output_per_million=15)
    sign_in(page, live_url)
    page.click("#threads-link")
    page.click("#new-thread-button")  # no title: the list shows the first message
    page.wait_for_selector("#message-form")
    send(
        page,
        "What is the weather like?",
        [{"content": "Sunny.", "usage": {"prompt_tokens": 40, "completion_tokens": 2}}],
    )
    answer = page.locator("#bubbles .bubble.role-assistant").first
    expect(answer).to_contain_text("Sunny.", timeout=15_000)
    expect(answer.locator(".turn-tokens")).to_have_text("42 tokens")
    expect(answer.locator(".turn-cost")).to_contain_text("USD")

    send(page, "Tell me a long story", [{"delay": 20, "content": ANSWER}])
    live = page.locator("#live-bubble")
    expect(live.locator("#stop-button")).to_be_visible()
    page.wait_for_function("() => (document.getElementById('live-text') || {textContent: ''}).textContent.length > 20")
    stop, bubble = live.locator("#stop-button").bounding_box(), live.bounding_box()
    assert bubble["y"] <= stop["y"] and stop["y"] + stop["height"] <= bubble["y"] + bubble["height"]  # inside the turn
    assert bubble["height"] < 200, bubble  # not a tall box
    screenshot(page, "live-thread-writing")
    page.click("#stop-button")
    interrupted = page.locator("#bubbles .bubble.role-assistant.interrupted")
    expect(interrupted).to_have_count(1, timeout=15_000)
    expect(interrupted.locator(".badge.interrupted")).to_have_text("interrupted by cancel")
    expect(interrupted.locator(".cancel-who")).to_have_text("by alice via playground")
    expect(interrupted).to_contain_text("word0")
    screenshot(page, "live-thread-interrupted")

    page.click("text=All conversations")
    row = page.locator("#threads li").first
    expect(row.locator(".thread-title")).to_have_text("What is the weather like?")
    expect(row.locator(".thread-meta")).to_contain_text("2 runs")
    expect(row.locator(".badge")).to_have_text("cancelled")
    screenshot(page, "live-thread-list")


def test_the_form_groups_tools_by_server_and_the_running_card_is_in_view_at_1280x800(
    browser_context, mcp_url, alice, screenshot
):
    page = browser_context(viewport={"width": 1280, "height": 800}).new_page()
    errors: list[str] = []
    watch(page, errors)
    sign_in(page, mcp_url)
    wait_for_tool(page, TOOL)
    groups = page.locator("details.tool-group")
    expect(groups.first.locator("summary")).to_contain_text("Built-in")
    mcp = page.locator("details.tool-group[data-group='mcp:everything']")
    expect(mcp.locator("summary")).to_contain_text("MCP server everything")
    assert mcp.get_attribute("open") is None  # collapsed: the form stays short
    write_note = page.locator("li[data-tool=write_note]")
    expect(write_note.locator(".approval-mark")).to_have_text("needs approval")
    expect(write_note.locator(".tool-desc")).not_to_be_empty()
    page.fill("#tool-search", "long-running")
    expect(mcp).to_have_attribute("open", "")
    expect(page.locator(f"li[data-tool='{TOOL}']")).to_be_visible()
    expect(page.locator("li[data-tool=calculator]")).to_be_hidden()
    screenshot(page, "live-form-tools-grouped")
    page.fill("#tool-search", "")
    script = json.dumps([{"tool_calls": [{"name": "sleep", "arguments": {"seconds": 6}}]}, {"content": "ok"}])
    start(page, script, ["sleep"])
    card = page.locator("#live-steps li[data-kind=tool-pending]")
    expect(card).to_be_visible()
    box = card.bounding_box()
    assert box["y"] >= 0 and box["y"] + box["height"] <= 800, box  # in the viewport after Start, no scrolling
    screenshot(page, "live-running-card-in-view")
    assert errors == []


def test_the_operations_breadcrumb_sits_in_the_admin_bar(page, live_url, django_user_model, screenshot):
    from django.urls import reverse

    path = reverse("admin:nrllm_agents_agentrun_operations")
    sign_in_admin(page, live_url, django_user_model, path)
    crumbs = page.locator(".breadcrumbs")
    expect(crumbs).to_contain_text("Operations")
    assert crumbs.evaluate("e => e.closest('nav') !== null && getComputedStyle(e).backgroundColor") == "rgb(38, 75, 93)"
    screenshot(page, "live-operations-breadcrumb")


DARK = """e => { const rgb = (c) => (c.match(/[\\d.]+/g) || []).slice(0, 3).map(Number);
  const lum = ([r, g, b]) => (0.2126 * r + 0.7152 * g + 0.0722 * b) / 255;
  let node = e, bg = getComputedStyle(node).backgroundColor;
  while (node && (bg === 'rgba(0, 0, 0, 0)' || bg === 'transparent')) {
    node = node.parentElement; bg = node ? getComputedStyle(node).backgroundColor : 'rgb(255, 255, 255)'; }
  return [lum(rgb(bg)), lum(rgb(getComputedStyle(e).color))]; }"""


def fits_and_is_dark(page: Page, selector: str) -> None:
    """At 390 px the page does not scroll sideways, and ``selector`` is drawn dark: a dark
    background (its own or the nearest painted one) behind light text.

    It waits for ``selector`` and a loaded document first: after a click that navigates, the old
    page may be gone and the new one not yet parsed (no ``documentElement`` to measure)."""
    page.locator(selector).first.wait_for(state="visible")
    page.wait_for_load_state("load")
    width = page.evaluate("() => [document.documentElement.scrollWidth, window.innerWidth]")
    assert width[0] <= width[1], (selector, width)
    element = page.locator(selector).first
    box = element.bounding_box()
    assert box["x"] >= 0 and box["x"] + box["width"] <= 391, (selector, box)
    background, text = element.evaluate(DARK)
    assert background < 0.35 and text > 0.5, (selector, background, text)


def test_the_form_the_conversations_and_an_interrupted_turn_at_390_px_in_dark_mode(
    browser_context, live_url, alice, screenshot
):
    from .test_thread_chat import ANSWER, send

    page = browser_context(viewport={"width": 390, "height": 844}, color_scheme="dark").new_page()
    errors: list[str] = []
    watch(page, errors)
    sign_in(page, live_url)
    fits_and_is_dark(page, "details.tool-group")  # the grouped tools of the new-run form
    fits_and_is_dark(page, "li[data-tool=write_note] .approval-mark")
    screenshot(page, "live-390-dark-form")

    page.click("#threads-link")
    page.click("#new-thread-button")
    page.wait_for_selector("#message-form")
    send(page, "Tell me a long story", [{"delay": 20, "content": ANSWER}])
    page.wait_for_function("() => (document.getElementById('live-text') || {textContent: ''}).textContent.length > 20")
    fits_and_is_dark(page, "#live-bubble")  # the bubble being written, Stop inside it
    screenshot(page, "live-390-dark-thread-writing")
    page.click("#stop-button")
    interrupted = page.locator("#bubbles .bubble.role-assistant.interrupted")
    expect(interrupted).to_have_count(1, timeout=15_000)
    fits_and_is_dark(page, "#bubbles .bubble.role-assistant.interrupted")
    fits_and_is_dark(page, "#bubbles .bubble.role-assistant.interrupted .badge.interrupted")
    screenshot(page, "live-390-dark-thread-interrupted")

    page.click("text=All conversations")
    fits_and_is_dark(page, "#threads li")
    screenshot(page, "live-390-dark-thread-list")
    assert errors == []
