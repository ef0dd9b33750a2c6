"""Acceptance (issue 49): the unmodified ``@ag-ui/client`` ``HttpAgent`` (npm, installed by .ci/run
into the gitignored ``.mcp-servers/``) in node, against gunicorn and a real ``rqworker`` on
PostgreSQL: a run with a tool, a Stop mid-answer (cancelled, its interrupted step recorded, within
1 s), an approval resumed, a reattach to a run in progress after the first client dropped. Every
event it got validates against ``@ag-ui/core``'s schemas.

``ag_ui_flow.mjs`` runs the flow and prints what it saw; this test asserts on it and on the rows.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from nrllm_agents.models import AgentRun, CancelSource, Note, RunStatus
from tests.e2e.web.servers import ROOT, serve, start_worker, stop

# transaction=True: the server and the worker are other processes.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres_only]

SCRIPT = Path(__file__).with_name("ag_ui_flow.mjs")
MODULES = Path(os.environ.get("NRLLM_TEST_AG_UI_MODULES", ROOT / ".mcp-servers/node_modules"))
ANSWER = "The answer comes in pieces, one word after another, as a model writes it."
SCRIPTS = {
    "calc": [{"tool_calls": [{"name": "calculator", "arguments": {"expression": "2+3"}}]}, {"content": "It is 5."}],
    "slow": [{"content": "word " * 400, "delay": 24.0}],
    "slowish": [{"content": ANSWER, "delay": 2.5}],
    "notes": [
        {"tool_calls": [{"name": "write_note", "arguments": {"title": "plan", "body": "ship it"}}]},
        {"content": "Noted."},
    ],
}


@pytest.fixture
def site(db, django_user_model, child_env, redis_url, tmp_path) -> Iterator[tuple[str, str]]:
    from rest_framework.authtoken.models import Token

    from nrllm_agents.catalog import agents

    user = django_user_model.objects.create_user(username="alice")
    tools = {"calc": ["calculator"], "notes": ["write_note"]}
    for name, script in SCRIPTS.items():
        agents.save(name, {"provider": "scripted", "tools": tools.get(name, []), "script": script}, description=name)
    key = Token.objects.create(user=user).key
    env = {
        **child_env,
        "NRLLM_STREAM_POLL_SECONDS": "0.05",
        "NRLLM_STREAM_HEARTBEAT_SECONDS": "2",
        "REDIS_URL": redis_url,
    }
    worker = start_worker(env, tmp_path)
    try:
        with serve("gunicorn", env, tmp_path, threads=16) as base:
            yield base, key
    finally:
        stop(worker)


def test_the_http_agent_streams_stops_resumes_and_reattaches(site):
    node = shutil.which("node")
    if node is None or not (MODULES / "@ag-ui/client/package.json").exists():
        pytest.fail(f"node and @ag-ui/client (in {MODULES}) are required: bash .ci/run installs them")
    base, key = site
    done = subprocess.run(
        [node, str(SCRIPT)],
        env={**os.environ, "AG_BASE": base, "AG_TOKEN": key, "AG_MODULES": str(MODULES)},
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["invalid"] == [], "every event validates against @ag-ui/core's schemas"
    assert {"RUN_STARTED", "RUN_FINISHED", "TEXT_MESSAGE_CONTENT", "TOOL_CALL_START", "TOOL_CALL_ARGS"} <= set(
        seen["sent"]
    )
    assert {"TOOL_CALL_END", "TOOL_CALL_RESULT", "STEP_STARTED", "STEP_FINISHED", "MESSAGES_SNAPSHOT"} <= set(
        seen["sent"]
    )

    tool = seen["tool"]
    assert tool["outcome"] == {"type": "success"}
    assert [m[0] for m in tool["messages"]] == ["user", "assistant", "tool", "assistant"]
    assert tool["messages"][1][2] == ["calculator"] and tool["messages"][3][1] == "It is 5."

    stopped = seen["stop"]
    assert stopped["stop"]["status"] == 200 and stopped["outcome"] == {"type": "cancelled"}
    run = AgentRun.objects.get(client_runs__client_run_id=stopped["runId"])
    assert (run.status, run.cancel_source) == (RunStatus.CANCELLED, CancelSource.AG_UI)
    llm = run.events.get(kind="llm").payload
    assert llm["interrupted"] is True and ("word " * 400).startswith(llm["content"]) and llm["content"]
    assert run.events.order_by("-sequence").first().kind == "cancelled"
    assert (run.stopped_at - run.cancel_requested_at).total_seconds() < 1.0
    assert stopped["ms"] < 1000, "RUN_FINISHED reached the client within a second of Stop"
    print(f"Stop to RUN_FINISHED in the client: {stopped['ms']} ms")

    approval = seen["approval"]
    assert approval["asked"]["type"] == "interrupt" and approval["asked"]["interrupts"][0]["reason"] == "tool_approval"
    assert "TOOL_CALL_RESULT" in approval["types"] and approval["outcome"] == {"type": "success"}
    assert Note.objects.get().title == "plan"

    reattach = seen["reattach"]
    assert reattach["types"][:3] == ["RUN_STARTED", "MESSAGES_SNAPSHOT", "STATE_SNAPSHOT"]
    assert reattach["outcome"] == {"type": "success"} and reattach["answer"].endswith(ANSWER)
    again = AgentRun.objects.get(client_runs__client_run_id=reattach["runId"])
    assert again.status == RunStatus.COMPLETED and again.cancel_source == "", "a disconnect cancelled nothing"
