"""The Node SDK (``@langchain/langgraph-sdk`` from npm, installed by .ci/run into the gitignored
``.mcp-servers/``), unmodified: create, stream in pieces, cancel with wait (``node_flow.mjs``)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from nrllm_agents.models import AgentRun

from .conftest import NODE_SDK

pytestmark = pytest.mark.django_db(transaction=True)  # the server and the worker are other processes

SCRIPT = Path(__file__).with_name("node_flow.mjs")


def test_the_node_sdk_creates_streams_and_cancels(site):
    node = shutil.which("node")
    if node is None or not (NODE_SDK / "package.json").exists():
        pytest.fail(f"node and @langchain/langgraph-sdk (at {NODE_SDK}) are required: bash .ci/run installs them")
    done = subprocess.run(
        [node, str(SCRIPT)],
        env={**os.environ, "LG_URL": site.url, "LG_API_KEY": site.api_key, "LG_SDK": str(NODE_SDK)},
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["assistants"] == ["helper"]
    assert seen["events"][0] == "metadata" and "values" in seen["events"]
    assert len(seen["chunks"]) > 1
    assert seen["final"][-1] == ["ai", "".join(seen["chunks"])]
    assert seen["cancelled_status"] == "interrupted"
    row = AgentRun.objects.get(pk=seen["slow_run_id"])
    assert row.stopped_at is not None and row.events.order_by("sequence").last().kind == "cancelled"
