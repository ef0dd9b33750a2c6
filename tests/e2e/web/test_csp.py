"""Issue 32 finding 10: a Content-Security-Policy on every page, enforced, no inline script.

Guards: no page sent one. Every page the app serves (the playground, its threads, a run, the
console, the admin, the API docs) now carries the enforced policy, and Chromium, which enforces
it, refuses nothing on any of them: the browser fixture fails a test on any violation, this test
and every other browser test alike.
"""

from __future__ import annotations

import json

import pytest
from playwright.sync_api import Page, expect

from nrllm_agents.models import AgentRun

from .test_console import sign_in_admin
from .test_playground import sign_in, start

pytestmark = pytest.mark.django_db(transaction=True)  # the server is another process

QUICK = json.dumps([{"content": "done"}])


def policy_of(page: Page, url: str) -> dict[str, list[str]]:
    response = page.goto(url)
    assert response is not None and response.status == 200, (url, response and response.status)
    header = response.headers.get("content-security-policy")
    assert header, f"no Content-Security-Policy on {url}"
    assert response.headers.get("content-security-policy-report-only") is None
    directives = {}
    for part in header.split(";"):
        name, *sources = part.split()
        directives[name] = sources
    return directives


def test_every_page_carries_the_enforced_policy_and_the_browser_refuses_nothing(
    browser_context, live_url, alice, django_user_model
):
    context = browser_context()
    page = context.new_page()
    sign_in(page, live_url)
    run_id = start(page, QUICK, [], mode="interactive")
    operator = browser_context().new_page()
    sign_in_admin(operator, live_url, django_user_model, "/admin/")
    operator.wait_for_url(f"{live_url}/admin/")
    thread_page = f"{live_url}/playground/threads/"
    pages = [
        (page, f"{live_url}/accounts/login/"),
        (page, f"{live_url}/playground/"),
        (page, f"{live_url}/playground/runs/{run_id}/"),
        (page, thread_page),
        (operator, f"{live_url}/admin/"),
        (operator, f"{live_url}/admin/nrllm_agents/agentrun/"),
        (operator, f"{live_url}/admin/nrllm_agents/agentrun/{run_id}/change/"),
        (operator, f"{live_url}/admin/nrllm_agents/agentrun/operations/"),
        (operator, f"{live_url}/admin/nrllm_agents/connection/add/"),
        (operator, f"{live_url}/api/docs/"),
    ]
    for tab, url in pages:
        policy = policy_of(tab, url)
        assert policy["script-src"] == ["'self'"], (url, policy)
        assert "'unsafe-inline'" not in policy.get("default-src", []), url
        assert policy["object-src"] == ["'none'"] and policy["frame-ancestors"] == ["'none'"]
        tab.wait_for_load_state("networkidle")
    expect(operator.locator("#swagger-ui .info")).to_be_visible()  # the docs ran their scripts
    assert AgentRun.objects.filter(pk=run_id).exists()
    assert browser_context.violations == []


def test_the_fixture_sees_a_refused_inline_script(browser_context, live_url, alice):
    """The watch works: an inline script a page adds is refused, and reported."""
    page = browser_context().new_page()
    sign_in(page, live_url)
    inline = "const s = document.createElement('script'); s.textContent = 'window.ran = 1'; document.body.append(s);"
    page.evaluate(f"() => {{ {inline} }}")
    page.wait_for_function("() => (window.__nrllmCspSeen || []).length > 0")
    assert page.evaluate("() => window.ran") is None  # enforced: it did not run
    page.evaluate("() => new Promise((done) => setTimeout(done, 0))")  # the binding's call has arrived
    assert any("script-src" in v for v in browser_context.violations), browser_context.violations
    browser_context.violations.clear()
