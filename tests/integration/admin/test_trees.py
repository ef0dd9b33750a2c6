"""The admin's run page links the tree: the parent, the root, each sub-agent run with its status
and spend, and the spend of the whole tree on the root (PostgreSQL and SQLite)."""

from __future__ import annotations

import re

import pytest

from nrllm_agents.models import AgentRun
from tests import waits
from tests.integration.executors.test_queue import no_redis  # noqa: F401  (fixture)
from tests.integration.runtime.test_trees import agent, calls

from .test_runs import change_url, op_client, operator  # noqa: F401

pytestmark = pytest.mark.django_db(transaction=True)  # the children run on executor threads

USAGE = {"prompt_tokens": 10, "completion_tokens": 5}


def test_the_run_page_links_the_tree_and_shows_its_spend(op_client, runtime, no_redis):  # noqa: F811
    agent("helper", [{"content": "helped", "usage": USAGE}])
    agent("lead", [{**calls("helper", 2), "usage": USAGE}, {"content": "done", "usage": USAGE}], ("helper",))
    root_id = runtime.enqueue({"agent": "lead", "prompt": "go"})
    assert waits.wait_local_idle(60)
    children = list(AgentRun.objects.filter(tree_parent_id=root_id))
    page = op_client.get(change_url(root_id)).content.decode()
    for child in children:
        assert change_url(child.pk) in page
    assert "3 runs, 60 tokens" in page
    # the fieldset admin_live.js swaps with the live section: its children move on their own
    assert re.search(r'<fieldset class="module aligned run-tree-live"[^>]*>\s*<h2[^>]*>Tree</h2>', page)
    page = op_client.get(change_url(children[0].pk)).content.decode()
    assert page.count(change_url(root_id)) >= 2  # called by, and root of the tree
    assert "1 runs, 15 tokens" in page  # a leaf: its own spend
