"""Acceptance (issue 38): the Node SDK (``@langchain/langgraph-sdk`` from npm, installed by .ci/run
into the gitignored ``.mcp-servers/``), unmodified, through the flow ``test_python_sdk.py`` drives:
assistants, streaming in pieces, reject, interrupt, an approval, cancel with wait, rollback.

``node_flow.mjs`` runs the flow and prints what it saw; this test asserts on it and on the rows.
The SDK talks through a recording proxy, so its every exchange is checked against
``/lg/openapi.json`` (``contract``), as the Python SDK's are.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import httpx
import pytest

from nrllm_agents.models import AgentRun, Note

from .conftest import NODE_SDK
from .helpers import ANSWER, NOTE, answer, slow

# transaction=True: the server and the worker are other processes. The SQLite tier runs this too,
# as it does the Python SDK's tests: runserver with the in-process executor.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.sqlite]

SCRIPT = Path(__file__).with_name("node_flow.mjs")
SCRIPTS = {"answer": answer(), "slow": slow(), "note": NOTE, "done": answer("done", 0), "first": answer("first", 0)}


def run_node_flow(site, url: str) -> dict:
    node = shutil.which("node")
    if node is None or not (NODE_SDK / "package.json").exists():
        pytest.fail(f"node and @langchain/langgraph-sdk (at {NODE_SDK}) are required: bash .ci/run installs them")
    env = {"LG_URL": url, "LG_API_KEY": site.api_key, "LG_SDK": str(NODE_SDK), "LG_ROOT": site.root}
    done = subprocess.run(
        [node, str(SCRIPT)],
        env={**os.environ, **env, "LG_SCRIPTS": json.dumps(SCRIPTS)},
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_node_sdk_drives_the_whole_flow(site, proxied):
    seen = run_node_flow(site, proxied)
    assert seen["assistants"] == ["helper"]

    stream = seen["stream"]
    assert stream["thread"] == ["idle", {"topic": "pieces"}]
    assert stream["events"][0] == "metadata" and stream["created_thread"]
    assert len(stream["pieces"]) > 1 and "".join(stream["pieces"]) == ANSWER
    assert stream["piece_ids"] == [stream["final_id"]]
    assert stream["final"] == [["human", "answer me"], ["ai", ANSWER]]
    assert ["agent"] in stream["updates"]
    assert (stream["run"]["status"], stream["run"]["assistant_id"]) == ("success", "helper")
    assert stream["state"] == [stream["final"], [], []]

    multitask = seen["multitask"]
    assert multitask["rejected"] == {"name": "HTTPError", "status": 409}, "reject is the SDK's conflict error"
    assert multitask["runs_after_reject"] == [multitask["first"]], "a rejected run creates nothing"
    assert multitask["joined"] == ["ai", "done"]
    assert multitask["first_status"] == "interrupted"
    turns = multitask["turns"]
    assert [t[0] for t in turns] == ["human", "ai", "human", "ai"]
    partial = turns[1][1]
    assert partial and "word " * 400 != partial and ("word " * 400).startswith(partial), "the partial turn stays"
    assert multitask["runs"] == [multitask["second"], multitask["first"]]

    approval = seen["approval"]
    (interrupt,) = approval["interrupts"]
    assert [c["name"] for c in interrupt["value"]["tool_calls"]] == ["write_note"]
    assert approval["waiting"] == [["tools"], [interrupt["id"]]]
    assert approval["thread_status"] == "interrupted"
    assert approval["updates"] == [["tools"], ["agent"]]
    assert Note.objects.get().title == "plan"
    assert approval["last"] == ["ai", "Noted."]
    assert approval["resumed_again"] == {"name": "HTTPError", "status": 409}, "nothing waits any more"

    cancel = seen["cancel"]
    on_return = cancel["on_return"]
    assert on_return["kinds"][-1] == "cancelled", "wait=true answered before the cancelled step"
    assert on_return["status"] == "cancelled"
    row = AgentRun.objects.get(pk=cancel["run"])
    assert row.stopped_at is not None
    interrupted = row.events.get(kind="llm")
    assert interrupted.payload["interrupted"] is True and interrupted.payload["content"]
    assert cancel["cancel_ms"] < 20_000, "the 55 s model call was cut short, not waited out"
    assert (cancel["status"], cancel["thread_status"]) == ("interrupted", "idle")

    rollback = seen["rollback"]
    assert rollback["get"] == {"name": "HTTPError", "status": 404}
    assert rollback["runs"] == [rollback["first"]]
    assert rollback["last"] == ["ai", "first"]
    row = AgentRun.objects.get(pk=rollback["run"])  # the audit keeps it, marked
    assert (row.status, row.rolled_back, row.cancel_source) == ("cancelled", True, "api")
    shown = httpx.get(f"{site.root}/api/runs/{rollback['run']}/", headers={"Authorization": f"Token {site.api_key}"})
    assert shown.status_code == 200 and shown.json()["thread"]["rolled_back"] is True
