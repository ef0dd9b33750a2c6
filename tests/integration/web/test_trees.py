"""The tree section of a playground run page (issue 36): a run's place in its tree and its
sub-agent runs, the fragment the page re-fetches while any run of it is active, and who may
read it."""

from __future__ import annotations

import pytest

from nrllm_agents.models import AgentRun
from tests import waits
from tests.integration.executors.test_queue import no_redis  # noqa: F401  (fixture)
from tests.integration.runtime.test_trees import agent, calls

pytestmark = pytest.mark.django_db(transaction=True)  # the children run on executor threads

USAGE = {"prompt_tokens": 10, "completion_tokens": 5}


def tree_url(run_id) -> str:
    return f"/playground/runs/{run_id}/tree/"


def test_the_section_lists_the_subtree_and_says_where_a_child_sits(client, runtime, alice, bob, no_redis):  # noqa: F811
    agent("leaf", [{"content": "leaf", "usage": USAGE}])
    agent("mid", [{**calls("leaf", 1), "usage": USAGE}, {"content": "mid", "usage": USAGE}], ("leaf",))
    agent("top", [{**calls("mid", 2), "usage": USAGE}, {"content": "top", "usage": USAGE}], ("mid",))
    root_id = runtime.enqueue({"agent": "top", "prompt": "go"}, owner=alice)
    assert waits.wait_local_idle(60)
    client.force_login(alice)
    section = client.get(tree_url(root_id))
    assert section.status_code == 200 and section["Cache-Control"] == "no-store"
    html = section.content.decode()
    assert 'data-active="false"' in html and "The root of its tree." in html
    below = list(AgentRun.objects.filter(tree_root_id=root_id).order_by("created_at", "pk"))
    assert html.count('class="tree-run ') == 4
    assert html.count("indent-0") == 2 and html.count("indent-1") == 2  # depth first, indented
    for run in below:
        assert f'href="/playground/runs/{run.pk}/"' in html
    assert "This run and the 4 below it: 120 tokens" in html
    leaf = next(r for r in below if r.tree_depth == 2)
    page = client.get(f"/playground/runs/{leaf.pk}/").content.decode()
    assert 'id="tree-parent"' in page and f'href="/playground/runs/{leaf.tree_parent_id}/"' in page
    assert f'href="/playground/runs/{root_id}/" id="tree-root"' in page and "(depth 2)" in page
    client.force_login(bob)
    assert client.get(tree_url(root_id)).status_code == 404  # not bob's to see


def test_a_run_of_no_tree_keeps_the_section_hidden(client, runtime, alice):
    result = runtime.run({"prompt": "p", "script": [{"content": "hi"}]}, owner=alice)
    client.force_login(alice)
    page = client.get(f"/playground/runs/{result.run_id}/").content.decode()
    assert 'id="run-tree"' in page and 'aria-labelledby="tree-heading" hidden' in page


def test_an_approval_waiting_below_is_decided_from_the_root_s_page(client, runtime, alice, bob, no_redis):  # noqa: F811
    from nrllm_agents.models import RunStatus
    from tests.integration.api.test_tree_approvals import gated_tree

    root_id, [first, second] = gated_tree(runtime, alice, children=2)
    client.force_login(bob)  # sees nothing of alice's tree, decides nothing in it
    assert client.post(f"/playground/runs/{root_id}/approve/", {"decision": "approve"}).status_code == 404
    client.force_login(alice)
    html = client.get(tree_url(root_id)).content.decode()
    for child in (first, second):  # each waiting run, named, with its own form on the root's page
        assert f'name="run_id" value="{child}"' in html
    assert html.count("Waits for the approval of <code>write_note</code>") == 2
    # two wait: the root alone does not say which; nothing changes
    refused = client.post(f"/playground/runs/{root_id}/approve/", {"decision": "approve"}, follow=True)
    assert "wait for approval" in refused.content.decode()
    assert AgentRun.objects.filter(pk__in=[first, second], status=RunStatus.WAITING_FOR_APPROVAL).count() == 2
    decided = client.post(f"/playground/runs/{root_id}/approve/", {"decision": "deny", "run_id": str(first)})
    assert decided.status_code == 302 and decided["Location"] == f"/playground/runs/{root_id}/"  # back to the root
    outside = client.post(f"/playground/runs/{root_id}/approve/", {"decision": "approve", "run_id": str(root_id)[::-1]})
    assert outside.status_code == 404  # not a run of this tree
    client.post(f"/playground/runs/{root_id}/approve/", {"decision": "approve", "run_id": str(second)})
    assert waits.wait_local_idle(60)
    assert AgentRun.objects.get(pk=root_id).status == RunStatus.COMPLETED
    denied = AgentRun.objects.get(pk=first).events.filter(kind="approval").get().payload
    assert denied["approved"] is False


def test_the_timeline_shows_the_sub_agent_runs_running_then_settled(client, runtime, alice, no_redis):  # noqa: F811
    from nrllm_agents.models import CancelSource
    from nrllm_agents.observability import gantt
    from tests.e2e.processes import wait_for

    agent("quick", [{"content": "done"}])
    agent("slow", [{"delay": 30, "content": "never"}])
    agent("boss", [{"tool_calls": [*calls("quick", 1)["tool_calls"], *calls("slow", 1)["tool_calls"]]},
                   {"content": "boss done"}], ("quick", "slow"))  # fmt: skip
    root_id = runtime.enqueue({"agent": "boss", "prompt": "go"}, owner=alice)
    children = AgentRun.objects.filter(tree_parent_id=root_id)
    wait_for(lambda: children.filter(status="completed").count() == 1 and children.count() == 2, what="one child done")
    root = AgentRun.objects.get(pk=root_id)
    bars = {b.title.split(",")[0]: b for b in gantt.build(root, runtime.events(root_id)).bars if "sub-agent" in b.title}
    assert {name: b.kind for name, b in bars.items()} == {"sub-agent quick": "child", "sub-agent slow": "pending"}
    assert "running for" in bars["sub-agent slow"].title
    client.force_login(alice)
    html = client.get(f"/playground/runs/{root_id}/picture/").content.decode()
    assert ">sub-agent 1<" in html and ">sub-agent 2<" in html and "bar-child" in html and "bar-pending" in html
    runtime.cancel(root_id, source=CancelSource.API, reason="enough")
    assert waits.wait_local_idle(60)
    root = AgentRun.objects.get(pk=root_id)
    settled = [b for b in gantt.build(root, runtime.events(root_id)).bars if "sub-agent slow" in b.title]
    assert settled[0].kind == "interrupted" and "cancelled after" in settled[0].title
