"""A conversation in a real browser: the answer being written grows live in the chat, Stop
cuts it short and its partial answer stays in the transcript, and an interrupting message
replaces the run in flight (the runs execute in the server's in-process executor)."""

from __future__ import annotations

import json

import pytest
from playwright.sync_api import Page, expect

from nrllm_agents.models import AgentRun, Thread

from .test_playground import sign_in

pytestmark = [pytest.mark.django_db(transaction=True)]

ANSWER = " ".join(f"word{i}" for i in range(48)) + "."


def open_new_conversation(page: Page, base: str) -> Thread:
    sign_in(page, base)
    page.click("#threads-link")
    page.fill("input[name=title]", "browser chat")
    page.click("#new-thread-button")
    page.wait_for_selector("#message-form")
    return Thread.objects.get(title="browser chat")


def send(page: Page, text: str, script: list[dict], strategy: str = "enqueue") -> None:
    page.fill("#id_prompt", text)
    page.select_option("#id_multitask_strategy", strategy)
    page.fill("#id_script", json.dumps(script))
    page.click("#send-button")


def test_the_answer_grows_live_and_stop_keeps_the_partial_turn(page, live_url, alice, screenshot):
    thread = open_new_conversation(page, live_url)
    send(page, "tell me a long story", [{"delay": 20, "content": ANSWER}])
    page.wait_for_function("() => (document.getElementById('live-text') || {textContent: ''}).textContent.length > 20")
    screenshot(page, "25-thread-answer-being-written")
    page.click("#stop-button")
    expect(page.locator("#live-bubble")).to_have_count(0, timeout=15_000)  # reloaded once the run stopped
    run = AgentRun.objects.get(thread=thread)
    assert run.status == "cancelled" and run.cancel_source == "playground"
    bubbles = page.locator("#bubbles .bubble")
    expect(bubbles).to_have_count(2)
    expect(bubbles.nth(0)).to_contain_text("tell me a long story")
    expect(bubbles.nth(1)).to_contain_text("word0")  # the interrupted turn stays
    assert ANSWER not in bubbles.nth(1).text_content()
    screenshot(page, "26-thread-stopped")


def test_an_interrupting_message_replaces_the_run_in_flight(page, live_url, alice):
    thread = open_new_conversation(page, live_url)
    send(page, "first", [{"delay": 20, "content": ANSWER}])
    expect(page.locator("#live-bubble")).to_be_visible()
    send(page, "second thoughts", [{"content": "fine, here is the short version"}], strategy="interrupt")
    expect(page.locator("#bubbles")).to_contain_text("fine, here is the short version", timeout=20_000)
    first, second = AgentRun.objects.filter(thread=thread).order_by("thread_position")
    assert first.status == "cancelled" and first.termination_reason == "interrupted_by_message"
    assert str(second.pk) in first.cancel_reason and second.status == "completed"
