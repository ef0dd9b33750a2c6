"""The first how-to runs as written (issue 35): ``agent_run "What is (17 + 25) * 3?" --tool
calculator --tool sleep`` from docs/howto/runs.md, with the demo script, records no tool error:
the demo calls only the tools it is offered and says which it would also use."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from nrllm_agents.domain.providers.scripted import ScriptedProvider, demo_script
from nrllm_agents.models import AgentRun, AgentRunEvent, RunStatus

from .test_commands import run

HOWTO = Path(__file__).resolve().parents[3] / "docs" / "howto" / "runs.md"


def first_command() -> list[str]:
    line = next(line for line in HOWTO.read_text().splitlines() if "manage.py agent_run" in line)
    words = shlex.split(re.sub(r"\s+#.*$", "", line))
    return words[words.index("manage.py") + 1 :]


@pytest.mark.django_db(transaction=True)  # the runtime records steps on connections of its own
def test_the_first_howto_as_written_records_no_tool_error():
    args = first_command()
    assert args[:1] == ["agent_run"] and "--script" not in args  # the demo script, as a newcomer runs it
    ran = run(*args)
    assert ran.code == 0, (ran.out, ran.err)
    run_row = AgentRun.objects.get()
    assert run_row.status == RunStatus.COMPLETED
    tools = [e.payload for e in AgentRunEvent.objects.filter(run=run_row, kind="tool")]
    assert tools and all(p["error"] is None for p in tools), tools
    assert {p["name"] for p in tools} <= {"calculator", "sleep"}
    assert "126" in run_row.final_text and "clock" not in run_row.final_text.split("(")[0]


def test_the_demo_says_what_it_would_also_use():
    script = demo_script(["calculator"])
    assert [t["tool_calls"][0]["name"] for t in script[:-1]] == ["calculator"]
    assert "current_time, sleep" in script[-1]["content"]
    assert ScriptedProvider().demo and not ScriptedProvider([{"content": "x"}]).demo
