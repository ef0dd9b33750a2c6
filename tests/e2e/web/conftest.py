"""Browser tests: Debian's Chromium driven by Playwright against a real server child process.

The server (``runserver --noreload``) and any ``rqworker`` run on the test database, so the
tests that use them are ``transaction=True``. Screenshots go to ``artifacts/screenshots/``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from django.db import connections

from .servers import ROOT, serve, start_worker, stop

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SCREENSHOTS = ROOT / "artifacts" / "screenshots"
PASSWORD = "alice-browser-pw"


@pytest.fixture
def server_env(child_env) -> dict[str, str]:
    return {**child_env, "NRLLM_STREAM_POLL_SECONDS": "0.05", "NRLLM_STREAM_HEARTBEAT_SECONDS": "2"}


@pytest.fixture
def live_url(server_env, tmp_path) -> Iterator[str]:
    """The app under ``runserver`` (interactive runs execute in its threads; no Redis)."""
    with serve("runserver", server_env, tmp_path) as base:
        yield base


@pytest.fixture
def queue_url(server_env, redis_url, tmp_path) -> Iterator[str]:
    """The app with ``REDIS_URL`` set, plus a real ``rqworker`` executing its queued runs."""
    env = {**server_env, "REDIS_URL": redis_url}
    worker = start_worker(env, tmp_path)
    try:
        with serve("runserver", env, tmp_path) as base:
            yield base
    finally:
        stop(worker)


# Reported by every page of a context, before any script of the page runs.
REPORT_CSP_VIOLATIONS = """
document.addEventListener("securitypolicyviolation", (event) => {
  const text = `${event.effectiveDirective} refused ${event.blockedURI || "inline"} `
    + `at ${event.sourceFile || document.location.href}:${event.lineNumber}`;
  (window.__nrllmCspSeen ||= []).push(text);
  window.__nrllmCspViolation(text);
});
"""


def watch_csp(context, violations: list[str]) -> None:
    """Collect into ``violations`` what the Content-Security-Policy refused on any page of
    ``context``: its ``securitypolicyviolation`` events and Chromium's console errors about it."""
    context.expose_binding("__nrllmCspViolation", lambda source, text: violations.append(text))
    context.add_init_script(REPORT_CSP_VIOLATIONS)
    context.on(
        "console",
        lambda msg: (
            violations.append(msg.text) if msg.type == "error" and "Content Security Policy" in msg.text else None
        ),
    )


@pytest.fixture
def browser_context(monkeypatch) -> Iterator[Callable]:
    """A factory of browser contexts on one Chromium; everything is closed afterwards."""
    # Playwright's sync API keeps an event loop in this thread, which trips Django's guard
    # against ORM calls from async code; the test's own ORM calls are plain synchronous ones.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    if not os.path.exists(CHROMIUM):
        pytest.fail(f"{CHROMIUM} is missing: install Debian's chromium package")
    from playwright.sync_api import sync_playwright

    violations: list[str] = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:

            def new_context(**options):
                context = browser.new_context(**{"viewport": {"width": 1280, "height": 1000}, **options})
                context.set_default_timeout(30_000)
                watch_csp(context, violations)
                return context

            new_context.violations = violations  # type: ignore[attr-defined]
            yield new_context
            # Every page ran under the enforced Content-Security-Policy: nothing it refused.
            assert not violations, f"Content-Security-Policy violations: {violations}"
        finally:
            browser.close()
            # ORM calls made while Playwright's loop runs get their own connection (Django keys
            # connections by async context); close it here, or it outlives the test database.
            connections.close_all()


@pytest.fixture
def page(browser_context):
    context = browser_context()
    yield context.new_page()
    context.close()


@pytest.fixture
def alice(django_user_model):
    return django_user_model.objects.create_user("alice", password=PASSWORD)


@pytest.fixture
def screenshot() -> Callable:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)

    def take(page, name: str) -> Path:
        path = SCREENSHOTS / f"{name}.png"
        page.screenshot(path=str(path), full_page=True)
        return path

    return take
