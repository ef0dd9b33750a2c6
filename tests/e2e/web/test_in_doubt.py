"""A call in doubt decided by a person in Debian's Chromium against a real server (issue 47): from
the playground's run page and from the admin's, at desktop width and at 390 px in dark mode.

The runs are put in doubt as in production, in this process (``tests.integration.doubt``:
``slow_note``'s worker lost after its effect, the run reaped and suspended); the server, which
has ``slow_note`` too, resumes them in its own executor after each decision.
Screenshots: ``artifacts/screenshots/in-doubt-*.png``."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse
from playwright.sync_api import Page, expect

from nrllm_agents.models import AgentRun, Note, RunStatus
from tests.integration.doubt import doubted, lost, lost_in_doubt, reaped_into_doubt, steps  # noqa: F401  (a fixture)
from tests.waits import wait_for

from .servers import serve
from .test_console import sign_in_admin, watch
from .test_live_everywhere import DARK, fits_and_is_dark
from .test_playground import sign_in

pytestmark = pytest.mark.django_db(transaction=True)  # the server is another process


@pytest.fixture
def doubt_url(server_env, tmp_path):
    """The app under ``runserver`` with ``slow_note`` (interactive and queued runs execute in its threads)."""
    env = {**server_env, "NRLLM_EXTRA_TOOLS": "slow_note=nrllm_agents.testing.tools.SlowNote"}
    with serve("runserver", env, tmp_path) as base:
        yield base


def change_path(run_id) -> str:
    return reverse("admin:nrllm_agents_agentrun_change", args=[run_id])


def settled(run_id) -> str | None:
    status = AgentRun.objects.get(pk=run_id).status
    return status if status in (RunStatus.COMPLETED, RunStatus.CANCELLED, RunStatus.FAILED) else None


def shows_the_call(page: Page) -> None:
    panel = page.locator("#in-doubt")
    expect(panel).to_be_visible()
    expect(panel).to_contain_text("A call may or may not have happened")
    expect(panel.locator("#doubt-tool")).to_have_text("slow_note")
    expect(panel.locator("#doubt-arguments")).to_contain_text('"title": "pay the invoice"')
    expect(panel.locator("#doubt-at time")).not_to_be_empty()  # when it started, in the reader's time
    expect(page.locator("#approve-button")).to_have_count(0)  # an approval is not what it waits for


def opened(context, base: str, run_id, seen: list[str], *, shown: bool = True) -> Page:
    """Alice's playground page of ``run_id`` in a new page of ``context``, showing the call in
    doubt (unless not ``shown`` yet); the page's errors go to ``seen``."""
    page = context.new_page()
    watch(page, seen)
    sign_in(page, base)
    page.goto(f"{base}/playground/runs/{run_id}/")
    if shown:
        shows_the_call(page)
    return page


def fits_and_is_dark_box(page: Page, selector: str) -> None:
    """``selector`` lies within 390 px (no sideways scroll for it) and is drawn dark (``DARK``)."""
    element = page.locator(selector).first
    element.wait_for(state="visible")
    box = element.bounding_box()
    assert box["x"] >= 0 and box["x"] + box["width"] <= 391, (selector, box)
    background, text = element.evaluate(DARK)
    assert background < 0.35 and text > 0.5, (selector, background, text)


def expected_only(seen: list[str], allowed: str) -> list[str]:
    """The page's errors but the refusals the test asked for (``allowed`` in the failed request's URL)."""
    return [line for line in seen if not (line.startswith("400 ") and allowed in line)]


def test_a_call_in_doubt_is_resolved_from_the_playground_and_from_the_admin(
    browser_context, doubt_url, alice, runtime, doubted, django_user_model, screenshot
):
    first = lost(runtime, owner=alice)  # its page is open when it comes to wait in doubt
    second = lost_in_doubt(runtime, owner=alice)
    seen: list[str] = []
    page = opened(browser_context(), doubt_url, first, seen, shown=False)
    expect(page.locator("#st-status")).to_have_text("running")
    page.evaluate("window.__samePage = true")
    reaped_into_doubt(runtime, first)
    shows_the_call(page)  # the stream said it waits: the page fetched the decision it waits for
    assert page.evaluate("window.__samePage") is True  # no reload
    expect(page.locator("#st-stream")).to_have_text("paused (a call in doubt)")
    for button in ("#happened-button", "#not-happened-button", "#doubt-cancel-button"):
        expect(page.locator(button)).to_be_visible()
    screenshot(page, "in-doubt-playground")

    page.fill("#doubt-result", "{not json")
    page.click("#happened-button")
    expect(page.locator("#messages")).to_contain_text("Not decided: result: not valid JSON")
    expect(page.locator("#in-doubt")).to_be_visible()  # nothing changed: still to decide
    assert AgentRun.objects.get(pk=first).status == RunStatus.WAITING_FOR_APPROVAL

    page.fill("#doubt-result", '{"note_id": "seen in the list"}')
    page.fill("#doubt-reason", "the note is in the list")
    page.click("#happened-button")
    expect(page.locator("#messages")).to_contain_text("Recorded: the call of slow_note happened")
    expect(page.locator("#decision")).to_be_hidden()
    expect(page.locator("#st-status")).to_have_text("completed", timeout=30_000)  # live, no reload
    expect(page.locator("#steps > li[data-kind=tool]")).to_contain_text("seen in the list")
    screenshot(page, "in-doubt-playground-resolved")
    assert Note.objects.filter(run_id=first).count() == 1  # not made again
    (decision,) = steps(first, "approval")
    assert (decision["in_doubt"], decision["by"], decision["reason"]) == (
        "happened",
        "alice",
        "the note is in the list",
    )

    admin = page.context.new_page()
    watch(admin, seen)
    sign_in_admin(admin, doubt_url, django_user_model, change_path(second))
    shows_the_call(admin)
    screenshot(admin, "in-doubt-admin")
    admin.click("#not-happened-button")
    expect(admin.locator(".messagelist")).to_contain_text("did not happen; it is made again")
    assert wait_for(lambda: settled(second), timeout=30, what="the run to end after the decision") == "completed"
    admin.reload()
    expect(admin.locator("#summary-status")).to_have_text("completed")
    expect(admin.locator("#in-doubt")).to_have_count(0)
    screenshot(admin, "in-doubt-admin-resolved")
    assert Note.objects.filter(run_id=second).count() == 2  # made again, as the person said
    assert steps(second, "approval")[0]["by"] == "root"
    assert expected_only(seen, f"/playground/runs/{first}/resolve/") == []


def test_a_call_in_doubt_at_390_px_in_dark_mode(
    browser_context, doubt_url, alice, runtime, doubted, django_user_model, screenshot
):
    first = lost_in_doubt(runtime, owner=alice)
    second = lost_in_doubt(runtime, owner=alice)
    context = browser_context(viewport={"width": 390, "height": 844}, color_scheme="dark")
    seen: list[str] = []
    page = opened(context, doubt_url, first, seen)
    fits_and_is_dark(page, "#in-doubt")
    fits_and_is_dark(page, "#doubt-arguments")
    for button in ("#happened-button", "#not-happened-button", "#doubt-cancel-button"):
        box = page.locator(button).bounding_box()
        assert box["x"] >= 0 and box["x"] + box["width"] <= 391, (button, box)
    screenshot(page, "in-doubt-390-dark-playground")
    page.fill("#doubt-result", "null")
    page.click("#happened-button")
    expect(page.locator("#st-status")).to_have_text("completed", timeout=30_000)
    fits_and_is_dark(page, "#steps > li[data-kind=tool]")
    screenshot(page, "in-doubt-390-dark-playground-resolved")

    admin = context.new_page()
    watch(admin, seen)
    sign_in_admin(admin, doubt_url, django_user_model, change_path(second))
    shows_the_call(admin)
    # The admin's page is wider than a phone (its timeline table scrolls): the panel itself fits.
    for part in ("#in-doubt", "#doubt-arguments", "#doubt-result"):
        fits_and_is_dark_box(admin, part)
    for button in ("#happened-button", "#not-happened-button", "#doubt-cancel-link"):  # Django's own buttons
        box = admin.locator(button).bounding_box()
        assert box["x"] >= 0 and box["x"] + box["width"] <= 391, (button, box)
    screenshot(admin, "in-doubt-390-dark-admin")
    admin.click("#doubt-cancel-link")  # the third decision: the run's cancel confirmation
    admin.fill("#id_reason", "refunded by hand")
    admin.click("input[type=submit][value='Yes, cancel']")
    expect(admin.locator(".messagelist")).to_contain_text(re.compile(r"cancelled"))
    expect(admin.locator("#in-doubt")).to_have_count(0)
    fits_and_is_dark_box(admin, "#run-summary")
    screenshot(admin, "in-doubt-390-dark-admin-cancelled")
    run = AgentRun.objects.get(pk=second)
    assert (run.status, run.cancel_reason) == (RunStatus.CANCELLED, "refunded by hand")
    assert Note.objects.filter(run_id=second).count() == 1
    assert seen == []
    context.close()
