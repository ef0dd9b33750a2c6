"""The playground in a real browser (issue 5 acceptance): live steps, Cancel at a boundary,
Approve / Deny, a queued run executed by a real worker, reload mid-run, and no JavaScript."""

from __future__ import annotations

import json

import pytest
from playwright.sync_api import Page, expect

from nrllm_agents.executors import dispatch
from nrllm_agents.models import AgentRun, Note, RunStatus

from .conftest import PASSWORD

pytestmark = [
    # The server and the worker are other processes on the test database: data must be committed.
    pytest.mark.django_db(transaction=True),
]


def sleeps(rounds: int, seconds: float) -> str:
    turns = [
        {
            "tool_calls": [{"name": "sleep", "arguments": {"seconds": seconds}}],
            "usage": {"prompt_tokens": 20, "completion_tokens": 5},
        }
        for _ in range(rounds)
    ]
    return json.dumps(turns + [{"content": "all done", "usage": {"prompt_tokens": 30, "completion_tokens": 3}}])


NOTE = json.dumps(
    [
        {
            "tool_calls": [{"name": "write_note", "arguments": {"title": "hello", "body": "from the browser"}}],
            "usage": {"prompt_tokens": 12, "completion_tokens": 9},
        },
        {"delay": 0.3, "content": "finished", "usage": {"prompt_tokens": 20, "completion_tokens": 2}},
    ]
)


def sign_in(page: Page, base: str) -> None:
    page.goto(f"{base}/accounts/login/?next=/playground/")
    page.fill("#id_username", "alice")
    page.fill("#id_password", PASSWORD)
    page.click("#login-form button[type=submit]")
    page.wait_for_url(f"{base}/playground/")


def start(page: Page, script: str, tools: list[str], mode: str = "interactive") -> str:
    """Fill the form, start the run, and return its id once its page is open."""
    page.fill("#id_prompt", "Watch me work")
    page.fill("#id_max_iterations", "60")
    page.fill("#id_script", script)
    page.evaluate("document.querySelectorAll('details.tool-group').forEach((d) => { d.open = true; })")
    for box in page.locator("input[name=tools]").all():
        box.set_checked(box.get_attribute("value") in tools)
    page.check(f"input[name=mode][value={mode}]")
    page.click("#start-button")
    page.wait_for_url("**/playground/runs/*/")
    return page.url.rstrip("/").rsplit("/", 1)[1]


def wait_steps(page: Page, at_least: int) -> None:
    page.wait_for_function("n => document.querySelectorAll('#steps > li').length >= n", arg=at_least)


def dom_sequences(page: Page) -> list[int]:
    return [int(s) for s in page.locator("#steps > li").evaluate_all("els => els.map(e => e.dataset.sequence)")]


def stored_sequences(run_id: str) -> list[int]:
    return list(AgentRun.objects.get(pk=run_id).events.order_by("sequence").values_list("sequence", flat=True))


@pytest.mark.sqlite  # the SQLite tier's smoke of this surface
def test_steps_arrive_live_and_cancel_stops_the_run_at_a_boundary(page, live_url, alice, screenshot):
    sign_in(page, live_url)
    run_id = start(page, sleeps(30, 0.3), ["sleep"])

    seen = []
    for n in (1, 2, 3, 4, 5):  # one by one, each while the run is still executing
        wait_steps(page, n)
        seen.append(page.locator("#steps > li").count())
        assert AgentRun.objects.get(pk=run_id).status == RunStatus.RUNNING
    assert seen == sorted(seen)
    expect(page.locator("#st-status")).to_have_text("running")
    screenshot(page, "01-running")

    page.click("#cancel-button")
    expect(page.locator("#st-status")).to_have_text("cancelled")
    expect(page.locator("#st-stream")).to_have_text("complete")
    steps = page.locator("#steps > li")
    last = steps.last
    assert last.get_attribute("data-kind") == "cancelled"
    expect(last).to_contain_text("alice via playground")
    run = AgentRun.objects.get(pk=run_id)
    # When it was requested, to the millisecond, in UTC (no raw ISO timestamp on the card).
    expect(last).to_contain_text(run.cancel_requested_at.strftime("%H:%M:%S.%f")[:-3] + " UTC")
    boundary = steps.nth(steps.count() - 2)
    assert boundary.get_attribute("data-kind") in ("llm", "tool", "request")
    sequence = boundary.get_attribute("data-sequence")
    if "interrupted" in (boundary.get_attribute("class") or ""):  # the cancel cut the step in flight short
        expect(boundary).to_contain_text("interrupted")
        expect(last).to_contain_text(f"interrupting step #{sequence} in flight")
    else:
        expect(last).to_contain_text(f"after step #{sequence}")
    expect(page.locator("#outcome")).to_contain_text("Cancelled by alice via playground")
    expect(page.locator("#cancel-form")).to_be_hidden()
    screenshot(page, "02-cancelled")

    count = steps.count()
    page.wait_for_timeout(1500)  # several of the run's 0.3 s rounds: nothing may follow the cancel
    assert steps.count() == count
    assert dom_sequences(page) == stored_sequences(run_id) == list(range(count))
    run.refresh_from_db()
    assert run.status == RunStatus.CANCELLED and run.stopped_at is not None and run.iterations < 30


@pytest.mark.parametrize("decision", ["approve", "deny"])
def test_a_run_waiting_for_approval_resumes_live_or_ends_with_the_denial(page, live_url, alice, screenshot, decision):
    sign_in(page, live_url)
    run_id = start(page, NOTE, ["write_note"])
    expect(page.locator("#st-status")).to_have_text("waiting_for_approval")
    expect(page.locator("#approval")).to_be_visible()
    pending = page.locator("#pending-calls")
    for part in ("write_note(", '"title": "hello"', '"body": "from the browser"'):  # key order is the database's
        expect(pending).to_contain_text(part)
    screenshot(page, "03-awaiting-approval")

    page.evaluate("window.__samePage = true")  # survives only if nothing reloads the page
    page.fill("#approval-reason", f"{decision}: checked by hand")
    page.click(f"#{decision}-button")
    expect(page.locator("#st-status")).to_have_text("completed")
    assert page.evaluate("window.__samePage") is True
    expect(page.locator("#approval")).to_be_hidden()
    approval = page.locator("#steps > li[data-kind=approval]")
    verdict = "approved" if decision == "approve" else "denied"
    expect(approval).to_contain_text(f"{verdict} by alice")
    expect(approval).to_contain_text(f"{decision}: checked by hand")  # the reason typed beside the buttons
    tools_run = page.locator("#steps > li[data-kind=tool]")
    if decision == "approve":
        expect(tools_run).to_have_count(1)
        expect(tools_run).to_contain_text("note_id")
        assert Note.objects.filter(run_id=run_id, title="hello").count() == 1
    else:
        # The denial is recorded as the call's tool step (nothing executed), so the stream
        # alone rebuilds what the model was told.
        expect(tools_run).to_have_count(1)
        expect(tools_run).to_contain_text("denied")
        assert not Note.objects.exists()
    expect(page.locator("#outcome")).to_contain_text("finished")
    assert dom_sequences(page) == stored_sequences(run_id)
    screenshot(page, "04-approved" if decision == "approve" else "05-denied")


def test_a_queued_run_executed_by_a_real_worker_streams_into_the_page(page, queue_url, alice, redis_url, screenshot):
    from redis import Redis
    from rq.job import Job

    sign_in(page, queue_url)
    run_id = start(page, sleeps(20, 0.2), ["sleep"], mode="queued")
    wait_steps(page, 3)
    assert AgentRun.objects.get(pk=run_id).status == RunStatus.RUNNING  # steps arrive before the end
    screenshot(page, "06-queued-running")
    expect(page.locator("#st-status")).to_have_text("completed")
    expect(page.locator("#outcome")).to_contain_text("all done")
    run = AgentRun.objects.get(pk=run_id)
    assert run.claimed_by.startswith("worker:")
    job = Job.fetch(dispatch.job_id(run_id), connection=Redis.from_url(redis_url))
    assert job.get_status() == "finished"  # an rqworker executed it, not the web process
    assert dom_sequences(page) == stored_sequences(run_id)
    screenshot(page, "07-queued-completed")


def contrast(foreground: str, background: str) -> float:
    """WCAG's contrast ratio of two ``rgb(r, g, b)`` colours."""

    def luminance(colour: str) -> float:
        channels = [int(c) / 255 for c in colour[colour.index("(") + 1 : colour.index(")")].split(",")[:3]]
        r, g, b = (c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in channels)
        return 0.2126 * r + 0.7152 * g + 0.0722 * b

    light, dark = sorted((luminance(foreground), luminance(background)), reverse=True)
    return (light + 0.05) / (dark + 0.05)


def test_in_dark_mode_the_queued_banner_is_readable_and_says_who_runs_it(browser_context, live_url, alice, screenshot):
    """Issue 48: the success banner drew light text on its light background (1.1:1), and said
    a worker starts the run where the in-process executor does."""
    # without JavaScript: the form posts, and the run's page shows the banner (Django's messages)
    page = browser_context(color_scheme="dark", java_script_enabled=False).new_page()
    sign_in(page, live_url)
    start(page, sleeps(1, 0.1), ["sleep"], mode="queued")
    banner = page.locator(".message.success")
    expect(banner).to_contain_text("this process starts it now")
    colours = banner.evaluate("e => [getComputedStyle(e).color, getComputedStyle(e).backgroundColor]")
    assert contrast(*colours) >= 4.5, colours
    screenshot(page, "queued-banner-dark")


def test_reload_mid_run_resumes_without_duplicated_or_missing_steps(page, live_url, alice, screenshot):
    sign_in(page, live_url)
    run_id = start(page, sleeps(30, 0.2), ["sleep"])
    wait_steps(page, 4)
    page.reload()
    before = page.locator("#steps > li").count()  # what the server rendered from the stored stream
    wait_steps(page, before + 3)  # ... then the live stream continues from there
    assert AgentRun.objects.get(pk=run_id).status == RunStatus.RUNNING
    screenshot(page, "08-after-reload")
    page.click("#cancel-button")
    expect(page.locator("#st-status")).to_have_text("cancelled")
    sequences = dom_sequences(page)
    assert sequences == list(range(len(sequences))) == stored_sequences(run_id)


def test_without_javascript_the_form_starts_a_run_and_the_page_shows_the_stored_stream(
    browser_context, live_url, alice, screenshot
):
    page = browser_context(java_script_enabled=False).new_page()
    sign_in(page, live_url)
    run_id = start(page, sleeps(2, 0.3), ["sleep"])
    for _ in range(60):  # the refresh link is there while the run is active
        if AgentRun.objects.get(pk=run_id).status != RunStatus.RUNNING and not page.locator("#refresh-link").count():
            break
        if page.locator("#refresh-link").count():
            page.click("#refresh-link")
        else:
            page.reload()
        page.wait_for_timeout(300)
    expect(page.locator("#st-status")).to_have_text("completed")
    assert dom_sequences(page) == stored_sequences(run_id)
    expect(page.locator("#steps > li[data-kind=tool]")).to_have_count(2)
    screenshot(page, "09-no-javascript")


def test_a_deadline_stops_the_run_live_and_continue_from_here_forks_it(page, live_url, alice, screenshot):
    sign_in(page, live_url)
    page.fill("#id_deadline_seconds", "1")
    run_id = start(page, sleeps(30, 0.3), ["sleep"])
    expect(page.locator("#st-status")).to_have_text("cancelled", timeout=15000)
    expect(page.locator("#st-reason")).to_have_text("deadline_exceeded")
    expect(page.locator("#steps > li").last).to_contain_text("deadline_seconds 1: measured")
    expect(page.locator("#outcome")).to_contain_text("deadline exceeded")
    # Added live when the run stopped: one button per step but the cancelled one.
    steps = page.locator("#steps > li")
    expect(page.locator("#steps .fork-button")).to_have_count(steps.count() - 1)
    screenshot(page, "06-deadline-exceeded")

    llm = page.locator("#steps > li[data-kind=llm]").first
    sequence = int(llm.get_attribute("data-sequence"))
    llm.locator(".step-menu summary").click()  # the fork actions sit in the step's menu
    llm.locator(".fork-button").click()
    page.wait_for_url(lambda url: run_id not in url and "/playground/runs/" in url)
    expect(page.locator("#parent-link")).to_be_visible()
    first = page.locator("#steps > li").first
    expect(first).to_have_attribute("data-kind", "forked")
    expect(first).to_contain_text(f"run {run_id} at step #{sequence}")
    expect(first).to_contain_text("not executed: the run was forked before this call")
    fork = AgentRun.objects.get(parent_id=run_id)
    assert fork.forked_from_sequence == sequence and fork.deadline_seconds == 1  # the limit is copied
    screenshot(page, "07-forked")
