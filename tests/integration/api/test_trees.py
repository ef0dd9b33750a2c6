"""A tree of runs through the API: a run's place in its tree, its children and its subtree's spend
(``GET /api/runs/{id}/``), and ``GET /api/runs/?root=ID``. The in-process executor runs the tree.

``transaction=True``: the children run on executor threads with connections of their own.
"""

from __future__ import annotations

import pytest

from nrllm_agents.models import AgentRun, RunStatus
from tests import waits
from tests.integration.executors.test_queue import no_redis  # noqa: F401  (fixture)
from tests.integration.runtime.test_trees import agent, calls

pytestmark = pytest.mark.django_db(transaction=True)

USAGE = {"prompt_tokens": 10, "completion_tokens": 5}


def test_a_run_shows_its_tree_and_the_tree_s_spend_and_root_lists_it(runtime, api, alice, bob, client_for, no_redis):  # noqa: F811
    agent("helper", [{"content": "helped", "usage": USAGE}])
    agent("lead", [{**calls("helper", 2), "usage": USAGE}, {"content": "done", "usage": USAGE}], ("helper",))
    root_id = runtime.enqueue({"agent": "lead", "prompt": "go"}, owner=alice)
    assert waits.wait_local_idle(60)
    assert AgentRun.objects.get(pk=root_id).status == RunStatus.COMPLETED
    body = api.get(f"/api/runs/{root_id}/").json()
    assert (body["parent_id"], body["root_id"], body["depth"]) == (None, str(root_id), 0)
    assert body["request"]["agents"] == ["helper"]
    tree = body["tree"]
    assert [c["status"] for c in tree["children"]] == ["completed", "completed"]
    assert [c["agent"] for c in tree["children"]] == ["helper", "helper"]
    assert tree["runs"] == 3
    # `children` keeps meaning forks, as before trees: the sub-agent runs are `tree.children` only
    assert body["children"] == [] and body["parent"] is None
    assert {c["call_id"] for c in tree["children"]} == set(
        AgentRun.objects.filter(tree_parent_id=root_id).values_list("tree_call_id", flat=True)
    )
    assert tree["spend"]["total_tokens"] == 4 * 15  # the root's two calls and one per child
    child_id = tree["children"][0]["run_id"]
    child = api.get(f"/api/runs/{child_id}/").json()  # owned by the parent's owner: alice sees it
    assert (child["parent_id"], child["root_id"], child["depth"]) == (str(root_id), str(root_id), 1)
    assert child["tree"]["spend"]["total_tokens"] == 15
    listed = api.get("/api/runs/", {"root": str(root_id)}).json()["results"]
    assert sorted(r["run_id"] for r in listed) == sorted([str(root_id), *(c["run_id"] for c in tree["children"])])
    assert client_for(bob).get(f"/api/runs/{child_id}/").status_code == 404  # not bob's tree
    bad = api.get("/api/runs/", {"root": "not-a-uuid"})
    assert bad.status_code == 400 and "root" in str(bad.json())


def test_the_schema_documents_the_sub_agent_runs_apart_from_the_forks(api):
    schema = api.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()
    run = schema["components"]["schemas"]["Run"]["properties"]
    assert "tree.children" in run["children"]["description"]  # forks, saying where sub-agents are
    tree = schema["components"]["schemas"][run["tree"]["allOf"][0]["$ref"].rsplit("/", 1)[1]]
    child = schema["components"]["schemas"][tree["properties"]["children"]["items"]["$ref"].rsplit("/", 1)[1]]
    assert set(child["properties"]) == {"run_id", "agent", "status", "call_id", "tokens", "cost"}
