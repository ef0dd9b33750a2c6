"""``agent_events --tree`` prints a run's tree: it and its sub-agents' runs, indented by depth."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import call_command

from tests import waits
from tests.integration.executors.test_queue import no_redis  # noqa: F401  (fixture)
from tests.integration.runtime.test_trees import tree

pytestmark = pytest.mark.django_db(transaction=True)  # the children run on executor threads


def test_agent_events_tree_prints_every_run_of_the_tree_depth_first(runtime, no_redis):  # noqa: F811
    tree(2, [{"content": "leaf answer", "usage": {"prompt_tokens": 3, "completion_tokens": 1}}])
    root_id = runtime.enqueue({"agent": "root", "prompt": "plan"})
    assert waits.wait_local_idle(60)
    out = io.StringIO()
    call_command("agent_events", str(root_id), "--tree", stdout=out)
    lines = out.getvalue().splitlines()
    assert len(lines) == 7
    assert lines[0].startswith(f"{root_id} root completed")
    assert [line[: len(line) - len(line.lstrip())] for line in lines] == [
        "",
        "  ",
        "    ",
        "    ",
        "  ",
        "    ",
        "    ",
    ]
    assert "leaf completed (4 tokens)" in lines[2]
    out = io.StringIO()
    call_command("agent_events", str(root_id), "--tree", "--json", stdout=out)
    entries = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [e["depth"] for e in entries] == [0, 1, 2, 2, 1, 2, 2]
