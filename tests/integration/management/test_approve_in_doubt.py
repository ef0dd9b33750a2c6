"""``manage.py agent_approve`` decides on a call in doubt (issue 47): ``--happened [--result JSON]``
records the result and does not make the call again, ``--not-happened`` makes it again. Bad input
is a one-line usage error (exit 2) and a decision of the wrong kind exits 1; nothing changes."""

from __future__ import annotations

import re
import shlex

import pytest

from nrllm_agents.models import AgentRun, AgentRunEvent, RunStatus
from tests.integration.management.test_commands import run, snapshot, waiting
from tests.integration.runtime.test_in_doubt import Charge, charge, lost_in_doubt  # noqa: F401  (fixture)

pytestmark = pytest.mark.django_db


def test_happened_records_the_result_given_as_json(runtime, charge):  # noqa: F811
    run_id = lost_in_doubt(runtime)
    ran = run("agent_approve", str(run_id), "--happened", "--result", '{"charge": "ch_7"}', "--by", "carol")
    assert ran.code == 0, ran
    assert ran.out.splitlines()[0] == f"run {run_id} resumed (it happened)"
    tool = AgentRunEvent.objects.get(run_id=run_id, kind="tool").payload
    assert tool["result"] == {"charge": "ch_7"} and Charge.made == 1
    decision = AgentRunEvent.objects.get(run_id=run_id, kind="approval").payload
    assert (decision["in_doubt"], decision["by"]) == ("happened", "carol")


def test_not_happened_queued_hands_it_to_a_worker_that_makes_the_call_again(runtime, charge):  # noqa: F811
    run_id = lost_in_doubt(runtime)
    ran = run("agent_approve", str(run_id), "--not-happened", "--queued")
    assert ran.code == 0 and "it did not happen; a worker resumes it" in ran.out, ran
    assert runtime.run_queued(run_id).outcome == "completed" and Charge.made == 2


@pytest.mark.parametrize(
    "args, said",
    [
        (["--not-happened", "--result", "1"], "--result goes with --happened"),
        (["--happened", "--result", "{oops"], "--result: not valid JSON"),
        (["--happened", "--result", "[" * 40 + "]" * 40], "--result: JSON nested deeper than 32 levels"),
        (["--happened", "--result", '"' + "x" * 300_000 + '"'], "result: at most 256 KiB of JSON"),
    ],
)
def test_bad_input_is_a_usage_error_and_changes_nothing(runtime, charge, args, said):  # noqa: F811
    run_id = lost_in_doubt(runtime)
    before = snapshot()
    ran = run("agent_approve", str(run_id), *args)
    assert ran.code == 2 and ran.err.startswith(said) and "\n" not in ran.err.strip(), ran
    assert snapshot() == before


def test_each_kind_of_wait_takes_its_own_decision(runtime, charge):  # noqa: F811
    doubted, gated = lost_in_doubt(runtime), waiting(runtime)
    before = snapshot()
    refused = run("agent_approve", str(doubted), "--approve")
    assert refused.code == 1 and "say whether it happened" in refused.err, refused
    refused = run("agent_approve", str(gated), "--happened")
    assert refused.code == 1 and "approve or deny it" in refused.err, refused
    assert snapshot() == before
    assert AgentRun.objects.get(pk=doubted).status == RunStatus.WAITING_FOR_APPROVAL


def page_commands() -> list[list[str]]:
    """docs/operations/workers.md's "A call in doubt" commands, as the page writes them."""
    from tests.conftest import ROOT

    page = (ROOT / "docs" / "operations" / "workers.md").read_text()
    section = page.split("## A call in doubt", 1)[1].split("\n## ", 1)[0]
    (block,) = re.findall(r"```console\n(.*?)```", section, re.S)
    return [shlex.split(line) for line in block.strip().splitlines()]


@pytest.mark.parametrize("which", [0, 1])
def test_the_workers_page_commands_run_as_written(runtime, charge, which):  # noqa: F811
    words = page_commands()[which]
    assert words[:2] == [".venv/bin/python", "manage.py"] and "RUN_ID" in words
    run_id = lost_in_doubt(runtime)
    ran = run(*[str(run_id) if w == "RUN_ID" else w for w in words[2:]])
    assert ran.code == 0, ran
    assert AgentRun.objects.get(pk=run_id).status == RunStatus.COMPLETED
    decision = AgentRunEvent.objects.get(run_id=run_id, kind="approval").payload
    assert decision["in_doubt"] == ("happened", "not_happened")[which] and decision["reason"]
    assert Charge.made == 1 + which  # made again only when it did not happen
