"""A run's tree in a real browser (issue 36): the playground's run page lists the sub-agent runs
of a parent, each with its status, spend and a link, and follows them live until they settle;
the admin's run page follows them with its live section. Screenshots go to
``artifacts/screenshots/tree-*.png``."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from nrllm_agents.models import AgentRun, RunStatus
from tests import waits
from tests.e2e.processes import wait_for
from tests.integration.executors.test_queue import no_redis  # noqa: F401  (fixture)
from tests.integration.runtime.test_trees import agent, calls

from .test_console import sign_in_admin
from .test_playground import sign_in, start

# The server is another process, and the children run on its executor threads: data must be committed.
pytestmark = pytest.mark.django_db(transaction=True)

USAGE = {"prompt_tokens": 10, "completion_tokens": 5}
ACTIVE = {s.value for s in (RunStatus.QUEUED, RunStatus.RUNNING)}


def test_the_run_page_lists_its_sub_agent_runs_and_follows_them_until_they_complete(page, live_url, alice, screenshot):
    agent("helper", [{"delay": 5, "content": "helped", "usage": USAGE}])
    agent("lead", [{**calls("helper", 2), "usage": USAGE}, {"content": "both helped", "usage": USAGE}], ("helper",))
    sign_in(page, live_url)
    page.select_option("#id_agent", "lead")
    run_id = start(page, "", [])
    page.evaluate("window.__samePage = true")  # gone after any reload

    children = page.locator("#run-tree .tree-run")
    expect(children).to_have_count(2)
    seen = set(children.evaluate_all("els => els.map((e) => e.dataset.status)"))
    assert seen <= ACTIVE, seen  # listed while they work (each answer takes 5 s)
    expected = list(AgentRun.objects.filter(tree_parent_id=run_id).order_by("created_at", "pk"))
    hrefs = page.locator("#run-tree a.tree-link").evaluate_all("els => els.map((e) => e.getAttribute('href'))")
    assert hrefs == [f"/playground/runs/{c.pk}/" for c in expected]

    expect(page.locator("#run-tree .tree-status")).to_have_text(["completed", "completed"], timeout=30_000)
    expect(children.first.locator(".tree-spend")).to_have_text("15 tokens")
    expect(page.locator("#st-status")).to_have_text("completed", timeout=30_000)
    expect(page.locator("#outcome .final")).to_have_text("both helped")
    expect(page.locator("#tree-total")).to_contain_text("60 tokens")
    expect(page.locator("#run-tree")).to_have_attribute("data-active", "false")
    assert page.evaluate("window.__samePage") is True  # no reload: the section followed them
    screenshot(page, "tree-playground")

    page.click("#run-tree a.tree-link >> nth=0")  # a child's page says who called it
    page.wait_for_url(f"**/playground/runs/{expected[0].pk}/")
    expect(page.locator("#tree-parent")).to_have_attribute("href", f"/playground/runs/{run_id}/")
    expect(page.locator("#tree-place")).to_contain_text("depth 1")


def test_the_admin_run_page_follows_the_tree_of_a_parent_waiting_for_its_children(
    page,
    live_url,
    django_user_model,
    runtime,
    no_redis,
    screenshot,  # noqa: F811
):
    # 10 s answers: the admin's sign-in and first load, on a loaded machine, come well before them
    agent("helper", [{"delay": 10, "content": "helped", "usage": USAGE}])
    agent("lead", [{**calls("helper", 2), "usage": USAGE}, {"content": "both helped", "usage": USAGE}], ("helper",))
    root_id = runtime.enqueue({"agent": "lead", "prompt": "go"})  # executed by this process's threads
    wait_for(lambda: AgentRun.objects.filter(tree_parent_id=root_id).count() == 2, timeout=30, what="two children")
    sign_in_admin(page, live_url, django_user_model, f"/admin/nrllm_agents/agentrun/{root_id}/change/")
    page.evaluate("window.__samePage = true")
    links = page.locator("fieldset.run-tree-live .field-tree_children_links")
    expect(links).not_to_contain_text("completed")
    expect(links).to_have_text(
        re.compile(r"helper, completed, 15 tokens.*helper, completed, 15 tokens"), timeout=30_000
    )
    expect(page.locator("fieldset.run-tree-live .field-tree_spend")).to_contain_text("3 runs, 60 tokens")
    assert page.evaluate("window.__samePage") is True  # swapped with the live section, no reload
    screenshot(page, "tree-admin")
    assert waits.wait_local_idle(60)


def test_a_reason_typed_for_an_approval_below_survives_the_tree_s_refreshes(
    page,
    live_url,
    alice,
    runtime,
    no_redis,  # noqa: F811
):
    from tests.integration.api.test_tree_approvals import gated_tree

    root_id, [child_id] = gated_tree(runtime, alice)  # the child waits: the section refreshes every second
    sign_in(page, live_url)
    page.goto(f"{live_url}/playground/runs/{root_id}/")
    waiting = page.locator(f'#run-tree [data-run-id="{child_id}"]')
    waiting.locator("input[name=reason]").click()
    page.keyboard.type("checked by ")
    tree_url = f"/playground/runs/{root_id}/tree/"
    for _ in range(2):  # two refreshes of the section while the user types
        with page.expect_response(lambda r: r.url.endswith(tree_url)):
            pass
    page.keyboard.type("hand")  # the caret is still in the field
    field = waiting.locator("input[name=reason]")
    expect(field).to_have_value("checked by hand")
    expect(field).to_be_focused()
    waiting.locator("button[value=deny]").click()
    page.wait_for_url(f"**/playground/runs/{root_id}/")
    approval = wait_for(
        lambda: AgentRun.objects.get(pk=child_id).events.filter(kind="approval").first(),
        timeout=30,
        what="the child's approval step",
    )
    assert (approval.payload["approved"], approval.payload["by"], approval.payload["reason"]) == (
        False,
        "alice",
        "checked by hand",
    )
    assert waits.wait_local_idle(60)
