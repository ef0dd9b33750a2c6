"""Issue 48: LangGraph's own chat UI (``create-agent-chat-app``'s vite template, built and served
by docs/agent-protocol.md's commands as written: ``chat_ui``) drives our runs through ``/lg/``
in Chromium, from its own origin: a message and its streamed answer with the tool call shown,
Stop (the run cancelled, its interrupted model call recorded), an approval accepted in the UI's
interrupt view, and a reload that shows the thread again. Every request the page makes to
``/lg/`` and each answer is checked against ``/lg/openapi.json`` (``contract``).

The UI fails the test, never skips it, when it cannot be built.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlencode, urlsplit

import pytest

from tests.e2e.web.conftest import browser_context, screenshot  # noqa: F401  (the browser fixtures)
from tests.e2e.web.servers import free_port

from . import chat_ui
from .contract import Exchange, Recorder
from .helpers import slow, writing

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

ANSWER = "Six times seven is 42, as the calculator says, and this answer comes a few words at a time."
TOOL = [
    {"tool_calls": [{"name": "calculator", "arguments": {"expression": "6*7"}}], "delay": 0.3},
    {"content": ANSWER, "delay": 5.0},
]
NOTE = [
    {"tool_calls": [{"name": "write_note", "arguments": {"title": "plan", "body": "ship it"}}]},
    {"content": "The note is written."},
]


@pytest.fixture(scope="session")
def web() -> Path:
    try:
        return chat_ui.built()
    except chat_ui.BuildFailed as failed:
        pytest.fail(str(failed))


@pytest.fixture
def ui_port() -> int:
    return free_port()


@pytest.fixture
def server_env(ui_port) -> dict[str, str]:
    return {"DJANGO_CORS_ALLOWED_ORIGINS": f"http://127.0.0.1:{ui_port}"}


@pytest.fixture
def ui(web, ui_port, tmp_path) -> Iterator[str]:
    """The build served by the page's own line (``npm run preview``), on a free port."""
    line = chat_ui.serve_line().replace("5173", str(ui_port))
    with open(tmp_path / "preview.log", "wb") as log:
        proc = subprocess.Popen(
            ["bash", "-c", line], cwd=web, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    url = f"http://127.0.0.1:{ui_port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                pytest.fail(f"{line} exited with {proc.returncode}:\n{(tmp_path / 'preview.log').read_text()}")
            try:
                with urllib.request.urlopen(url, timeout=5) as answer:
                    if answer.status == 200:
                        break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            assert time.monotonic() < deadline, (tmp_path / "preview.log").read_text()
            time.sleep(0.2)
        yield url
    finally:
        os.killpg(proc.pid, signal.SIGTERM)  # npm and the vite it started: the group this test made
        proc.wait(timeout=15)


@pytest.fixture
def assistants(alice):
    from nrllm_agents.catalog import agents

    agents.save("calc", {"provider": "scripted", "tools": ["calculator"], "script": TOOL}, description="calc")
    agents.save("writer", {"provider": "scripted", "tools": [], "script": slow()}, description="writer")
    agents.save("notes", {"provider": "scripted", "tools": ["write_note"], "script": NOTE}, description="notes")


def record(recorder: Recorder, api: str):
    """A ``requestfinished`` listener that records the page's exchanges with ``/lg/``."""
    prefix = urlsplit(api).path

    def on_finished(request) -> None:
        if not request.url.startswith(api):
            return
        response = request.response()
        body = request.post_data
        answer = None
        if response.headers.get("content-type", "").startswith("application/json"):
            text = response.text()
            answer = json.loads(text) if text else None
        path = urlsplit(request.url).path.removeprefix(prefix)
        sent = json.loads(body) if body else None
        recorder.seen.append(Exchange(request.method, path, sent, response.status, answer))

    return on_finished


def runs_of(agent: str):
    from nrllm_agents.models import AgentRun

    return AgentRun.objects.filter(agent_version__agent__name=agent).order_by("created_at")


def until(check, timeout: float = 30.0, step: float = 0.02):
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found or time.monotonic() > deadline:
            return found
        time.sleep(step)


def test_langgraph_chat_ui_sends_streams_stops_approves_and_reloads(
    ui, site, contract, assistants, browser_context, screenshot
) -> None:
    context = browser_context()
    page = context.new_page()
    page.on("requestfinished", record(contract, site.url))
    failed: list[str] = []
    page.on("requestfailed", lambda r: r.url.startswith(site.url) and failed.append(f"{r.method} {r.url} {r.failure}"))

    # First visit: the UI asks where the deployment is, which assistant, and the API key.
    page.goto(ui)
    page.fill("#apiUrl", site.url)
    page.fill("#assistantId", "calc")
    page.fill("#apiKey", site.api_key)
    page.get_by_role("button", name="Continue").click()
    screenshot(page, "chat-ui-1-connected")

    # A message: the tool call is shown, then the answer.
    box = page.get_by_placeholder("Type your message...")
    box.fill("What is 6 times 7?")
    page.get_by_role("button", name="Send").click()
    page.get_by_text("calculator").first.wait_for()
    # Streamed: the answer is seen part-written (the scripted model writes it over 5 s), then whole.
    page.get_by_text("Six times seven is 42", exact=False).wait_for()
    assert ANSWER not in page.inner_text("body"), "the answer came whole, not streamed"
    page.get_by_text(ANSWER).wait_for()
    screenshot(page, "chat-ui-2-answer-and-tool-call")
    assert until(lambda: runs_of("calc").get().status == "completed"), runs_of("calc").get().status

    # Stop: the run cancelled at once, its model call recorded as interrupted.
    page.goto(f"{ui}/?{urlencode({'apiUrl': site.url, 'assistantId': 'writer'})}")
    page.get_by_placeholder("Type your message...").fill("Write at length.")
    page.get_by_role("button", name="Send").click()
    assert until(lambda: (r := runs_of("writer").first()) is not None and writing(r.pk)), "the run never wrote"
    page.get_by_text("word word", exact=False).first.wait_for()  # the answer streams
    stop = page.get_by_role("button", name="Cancel")
    screenshot(page, "chat-ui-3-writing")
    pressed = time.monotonic()
    stop.click()
    cancelled = until(lambda: runs_of("writer").get().status == "cancelled", timeout=10, step=0.01)
    took = time.monotonic() - pressed
    assert cancelled, runs_of("writer").get().status
    assert took < 1.0, f"cancelled {took:.2f} s after Stop"
    assert until(lambda: runs_of("writer").get().stopped_at is not None), "the cancel was never acknowledged"
    step = runs_of("writer").get().events.get(kind="llm")
    assert step.payload["interrupted"] is True and step.payload["content"]
    screenshot(page, "chat-ui-4-stopped")

    # An approval: the run waits; the UI's interrupt view accepts; the run resumes and finishes.
    page.goto(f"{ui}/?{urlencode({'apiUrl': site.url, 'assistantId': 'notes'})}")
    page.get_by_placeholder("Type your message...").fill("Write a note.")
    page.get_by_role("button", name="Send").click()
    assert until(lambda: (r := runs_of("notes").first()) is not None and r.status == "waiting_for_approval")
    accept = page.get_by_role("button", name="Accept")
    screenshot(page, "chat-ui-5-approval")
    accept.wait_for()
    accept.click()
    page.get_by_text("The note is written.").wait_for()
    assert until(lambda: runs_of("notes").get().status == "completed"), runs_of("notes").get().status
    screenshot(page, "chat-ui-6-approved")

    # Reload: the thread (in the URL) comes back, and the history lists it (and only it).
    assert "threadId=" in page.url, page.url
    page.goto(f"{page.url}&chatHistoryOpen=true")  # a reload, with the history open
    page.get_by_text("The note is written.").wait_for()
    listed = page.get_by_role("button", name="Write a note.")  # the history: this assistant's one thread
    listed.wait_for()
    assert listed.count() == 1
    screenshot(page, "chat-ui-7-reloaded")
    context.close()
    # The one stream that did not finish is the one Stop left; any other request that did not
    # finish is a read the UI itself abandoned (a history poll cut by the reload), never an error.
    streams = [f for f in failed if "/runs/stream" in f]
    assert len(streams) == 1 and "ERR_ABORTED" in streams[0], failed
    assert all(
        "ERR_ABORTED" in f and f.split()[-2].endswith(("/history", "/search", "/state"))
        for f in failed
        if f not in streams
    ), failed
