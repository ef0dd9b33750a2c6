"""The model's words live in a real browser (issue 11 acceptance): the answer appears in pieces
before its llm step is recorded, Stop in the middle of it shows the interrupted step and
``cancelled`` within a second, and a reload mid-answer loses no recorded step."""

from __future__ import annotations

import json
import time

import pytest
from playwright.sync_api import Page, expect

from nrllm_agents.models import AgentRun, RunStatus

from .test_playground import dom_sequences, sign_in, start, stored_sequences

pytestmark = [pytest.mark.django_db(transaction=True)]

ANSWER = " ".join(f"word{i}" for i in range(48)) + "."


def writing(seconds: float, before: int = 0) -> str:
    """``before`` calculator rounds, then an answer written over ``seconds``."""
    turns = [
        {
            "tool_calls": [{"name": "calculator", "arguments": {"expression": f"{i}+1"}}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 2},
        }
        for i in range(before)
    ]
    return json.dumps(
        turns + [{"delay": seconds, "content": ANSWER, "usage": {"prompt_tokens": 20, "completion_tokens": 48}}]
    )


def live_text(page: Page) -> str:
    return page.evaluate("() => (document.querySelector('#live-steps .live-text') || {}).textContent || ''")


def llm_steps_stored(run_id: str) -> int:
    return AgentRun.objects.get(pk=run_id).events.filter(kind="llm").count()


def grows(page: Page, longer_than: int) -> str:
    page.wait_for_function(
        "n => ((document.querySelector('#live-steps .live-text') || {}).textContent || '').length > n", arg=longer_than
    )
    return live_text(page)


def test_the_answer_appears_in_pieces_before_its_step_is_recorded(page, live_url, alice, screenshot):
    sign_in(page, live_url)
    run_id = start(page, writing(4), [])

    seen = []
    for _ in range(3):  # three growing snapshots, each while no llm step is stored yet
        text = grows(page, len(seen[-1]) if seen else 0)
        assert llm_steps_stored(run_id) == 0
        assert ANSWER.startswith(text.lstrip(" …")) or text.lstrip(" …") in ANSWER
        seen.append(text)
    assert len(seen[0]) < len(seen[1]) < len(seen[2]) < len(ANSWER)
    expect(page.locator("#live-steps .pending")).to_contain_text("writing…")
    expect(page.locator("#live-steps #stop-inline")).to_be_visible()
    screenshot(page, "11-answer-being-written")

    expect(page.locator("#st-status")).to_have_text("completed", timeout=15_000)
    expect(page.locator("#live-steps .pending")).to_have_count(0)  # replaced by the recorded step
    llm = page.locator("#steps > li[data-kind=llm]")
    expect(llm).to_have_count(1)
    expect(llm).to_contain_text(ANSWER)
    assert dom_sequences(page) == stored_sequences(run_id)
    screenshot(page, "12-answer-recorded")


def test_stop_in_the_middle_of_the_answer_shows_the_interrupted_step_and_cancelled_within_a_second(
    page, live_url, alice, screenshot
):
    sign_in(page, live_url)
    run_id = start(page, writing(20), [])
    grows(page, 30)
    screenshot(page, "13-before-stop")

    clicked = time.monotonic()
    page.click("#stop-inline")
    expect(page.locator("#st-status")).to_have_text("cancelled", timeout=5_000)
    elapsed = time.monotonic() - clicked
    # the answer had 20 s to go: a stop in well under that cut it short (2 s: the browser, the
    # server and the stream on a loaded machine; the cancel itself takes milliseconds)
    assert elapsed < 2.0, elapsed

    interrupted = page.locator("#steps > li.interrupted[data-kind=llm]")
    expect(interrupted).to_have_count(1)
    expect(interrupted).to_contain_text("cut short by the cancel")
    expect(page.locator("#steps > li").last).to_have_attribute("data-kind", "cancelled")
    expect(page.locator("#live-steps .pending")).to_have_count(0)
    screenshot(page, "14-stopped-mid-answer")

    run = AgentRun.objects.get(pk=run_id)
    assert run.status == RunStatus.CANCELLED and run.stopped_at is not None
    partial = run.events.get(kind="llm").payload
    assert partial["interrupted"] and partial["content"] and ANSWER.startswith(partial["content"])
    assert len(partial["content"]) < len(ANSWER)
    assert dom_sequences(page) == stored_sequences(run_id)


def test_reload_mid_answer_loses_no_recorded_step(page, live_url, alice, screenshot):
    sign_in(page, live_url)
    run_id = start(page, writing(5, before=3), ["calculator"])
    grows(page, 20)
    assert llm_steps_stored(run_id) == 3  # the three tool rounds; the answer is still being written

    page.reload()
    text = grows(page, 0)  # the answer goes on growing after the reload
    assert llm_steps_stored(run_id) == 3
    assert dom_sequences(page) == stored_sequences(run_id)  # every recorded step, once
    screenshot(page, "15-reloaded-mid-answer")
    assert text

    expect(page.locator("#st-status")).to_have_text("completed", timeout=15_000)
    assert dom_sequences(page) == stored_sequences(run_id) == list(range(len(stored_sequences(run_id))))
    expect(page.locator("#steps > li[data-kind=llm]").last).to_contain_text(ANSWER)


@pytest.mark.postgres_only
def test_a_queued_run_on_a_real_worker_streams_its_answer_too(page, queue_url, alice, screenshot):
    sign_in(page, queue_url)
    run_id = start(page, writing(4), [], mode="queued")
    text = grows(page, 10)
    assert llm_steps_stored(run_id) == 0 and text
    screenshot(page, "16-queued-answer-being-written")
    expect(page.locator("#st-status")).to_have_text("completed", timeout=20_000)
    expect(page.locator("#steps > li[data-kind=llm]")).to_contain_text(ANSWER)
