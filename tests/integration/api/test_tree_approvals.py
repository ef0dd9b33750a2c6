"""Approvals in a child surface at the root (issue 36): the root's page names the run and the
tool that wait, and a decision on the root is for that run (``POST /api/runs/{root}/approve/``);
several waiting runs are a 409 naming them, and ``run_id`` picks one.

``transaction=True``: the children run on executor threads with connections of their own.
"""

from __future__ import annotations

import uuid

import pytest

from nrllm_agents.catalog import agents as catalog
from nrllm_agents.models import AgentRun, RunStatus
from tests import waits
from tests.e2e.processes import wait_for
from tests.integration.executors.test_queue import no_redis  # noqa: F401  (fixture)
from tests.integration.runtime.test_trees import agent, calls

pytestmark = pytest.mark.django_db(transaction=True)

NOTE = {"tool_calls": [{"name": "write_note", "arguments": {"title": "t", "body": "b"}}]}


def gated_tree(runtime, owner, children: int = 1):
    """A root whose ``children`` sub-agent runs each wait for the approval of ``write_note``;
    returns the root's id and its children's, once they all wait."""
    definition = {"provider": "scripted", "script": [NOTE, {"content": "noted"}], "tools": ["write_note"]}
    catalog.save("gated", definition, description="writes a note")
    agent("boss", [calls("gated", children), {"content": "boss done"}], ("gated",))
    root_id = runtime.enqueue({"agent": "boss", "prompt": "note it"}, owner=owner)
    waiting = AgentRun.objects.filter(tree_parent_id=root_id, status=RunStatus.WAITING_FOR_APPROVAL)
    wait_for(lambda: waiting.count() == children, timeout=30, what="the children waiting for approval")
    assert AgentRun.objects.get(pk=root_id).status == RunStatus.WAITING_FOR_CHILDREN
    return root_id, list(waiting.order_by("created_at", "pk").values_list("pk", flat=True))


def test_a_child_s_approval_shows_on_the_root_and_approving_the_root_decides_it(
    runtime,
    api,
    alice,
    bob,
    client_for,
    no_redis,  # noqa: F811
):
    root_id, [child_id] = gated_tree(runtime, alice)
    page = api.get(f"/api/runs/{root_id}/").json()
    [waiting] = page["tree"]["awaiting_approval"]
    assert (waiting["run_id"], waiting["tools"], waiting["agent"]) == (str(child_id), ["write_note"], "gated")
    assert waiting["detail"] == f"waits for the approval of write_note in run {child_id}"
    assert client_for(bob).post(f"/api/runs/{root_id}/approve/", {"approved": True}, format="json").status_code == 404
    answer = api.post(f"/api/runs/{root_id}/approve/", {"approved": True}, format="json")
    assert answer.status_code == 200, answer.content
    body = answer.json()
    assert (body["run_id"], body["outcome"], body["status"]) == (str(child_id), "completed", "completed")
    assert waits.wait_local_idle(60)
    root = AgentRun.objects.get(pk=root_id)
    assert (root.status, root.final_text) == (RunStatus.COMPLETED, "boss done")
    again = api.post(f"/api/runs/{root_id}/approve/", {"approved": True}, format="json")
    assert again.status_code == 409 and "not waiting for approval" in again.json()["detail"]


def test_several_waiting_approvals_are_refused_until_one_is_named(runtime, api, alice, no_redis):  # noqa: F811
    root_id, children = gated_tree(runtime, alice, children=2)
    refused = api.post(f"/api/runs/{root_id}/approve/", {"approved": True}, format="json")
    assert refused.status_code == 409
    assert refused.json()["waiting_for_approval"] == [str(pk) for pk in children]
    assert all(str(pk) in refused.json()["detail"] for pk in children)
    assert all(AgentRun.objects.get(pk=pk).status == RunStatus.WAITING_FOR_APPROVAL for pk in children)
    elsewhere = api.post(
        f"/api/runs/{root_id}/approve/", {"approved": True, "run_id": str(uuid.uuid4())}, format="json"
    )
    assert elsewhere.status_code == 404  # not a run of this tree
    first = api.post(f"/api/runs/{root_id}/approve/", {"approved": False, "run_id": str(children[0])}, format="json")
    assert (first.status_code, first.json()["run_id"]) == (200, str(children[0]))
    # one is left: the root's decision is for it, with no run_id
    last = api.post(f"/api/runs/{root_id}/approve/", {"approved": True, "queued": True}, format="json")
    assert (last.status_code, last.json()["run_id"]) == (202, str(children[1]))
    assert waits.wait_local_idle(60)
    assert AgentRun.objects.get(pk=root_id).status == RunStatus.COMPLETED
    assert [AgentRun.objects.get(pk=pk).final_text for pk in children] == ["noted", "noted"]
