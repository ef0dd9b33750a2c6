"""``manage.py agent_reap`` through ``call_command``: its summary, ``--dry-run``, ``--limit``, and the
embedded default (no ``REDIS_URL``), where the runs it requeues execute in this very process.

Every test needs ``transaction=True``: on the embedded default the requeued runs execute in the
in-process executor's threads, over their own database connections, so every row must be committed.
"""

from __future__ import annotations

import datetime as dt
import io
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.utils import timezone

from nrllm_agents import store
from nrllm_agents.domain import Step, StepKind
from nrllm_agents.models import AgentRun, AgentRunEvent, RunStatus
from nrllm_agents.runtime.segment import SegmentTrace, identity
from nrllm_agents.validation.run_request import RunRequest
from tests import waits
from tests.integration.runs import kinds

pytestmark = pytest.mark.django_db(transaction=True)

CALC = [{"tool_calls": [{"name": "calculator", "arguments": {"expression": f"{i} + 1"}}]} for i in range(2)]
SCRIPT = [*CALC, {"content": "done"}]


def request(script: list[dict[str, Any]] = SCRIPT) -> dict[str, Any]:
    return {"prompt": "reap me", "tools": ["calculator"], "script": script}


@pytest.fixture(autouse=True)
def embedded(settings):
    """The embedded default: no REDIS_URL, queued runs execute in this process."""
    settings.REDIS_URL = None
    settings.NRLLM_AGENTS = {**settings.NRLLM_AGENTS, "MAX_ATTEMPTS": 2}
    yield
    assert waits.wait_local_idle(30), "the in-process executor is still busy"


def reap(*args: str) -> str:
    """The lease line of the summary (the second line reports the queued sweep)."""
    out = io.StringIO()
    call_command("agent_reap", *args, stdout=out)
    return out.getvalue().strip().splitlines()[0]


def died_running(steps: list[Step], *, script: list[dict[str, Any]] = SCRIPT) -> AgentRun:
    """A queued run claimed by a worker that recorded ``steps`` and then died (no renewal since)."""
    req = RunRequest.from_mapping(request(script))
    run_id = store.create_queued(req.row_fields(), req.as_dict()).pk  # stored, not dispatched
    owner = identity("worker")
    assert store.claim_queued(run_id, claimed_by=owner, lease_expires=store.lease_until()).applied
    trace = SegmentTrace(run_id, owner=owner, next_sequence=0)
    for step in steps:
        trace(step)
    expire(run_id)
    return AgentRun.objects.get(pk=run_id)


def begun(*, expired: bool = True, **fields: Any) -> AgentRun:
    """A running run whose segment never recorded a step; its lease expired unless told otherwise."""
    run = store.begin(
        RunRequest.from_mapping(request()).row_fields(),
        claimed_by=identity("worker"),
        lease_expires=store.lease_until(),
    )
    if fields:
        AgentRun.objects.filter(pk=run.pk).update(**fields)
    if expired:
        expire(run.pk)
    return AgentRun.objects.get(pk=run.pk)


def expire(run_id: Any) -> None:
    """Test setup: the lease ran out, as if the worker stopped renewing it."""
    AgentRun.objects.filter(pk=run_id).update(lease_expires=timezone.now() - dt.timedelta(seconds=1))


def request_step(round_: int = 1) -> Step:
    return Step(StepKind.REQUEST, round_, {"messages": [{"role": "user", "content": "reap me"}]})


def llm_step(round_: int, **payload: Any) -> Step:
    return Step(StepKind.LLM, round_, {"content": None, "tool_calls": [], "usage": {}, **payload})


def sequences(run_id: Any) -> list[int]:
    return list(AgentRunEvent.objects.filter(run_id=run_id).order_by("sequence").values_list("sequence", flat=True))


def snapshot(*runs: AgentRun) -> list[dict[str, Any]]:
    return list(AgentRun.objects.filter(pk__in=[r.pk for r in runs]).order_by("pk").values())


def test_summary_counts_each_verdict_and_requeued_runs_finish_before_the_command_returns(settings):
    """Embedded default: the command executes what it requeued, in this process, and waits for it.
    ``IN_DOUBT = "fail"`` (the default waits for a person: test_in_doubt.py)."""
    settings.NRLLM_AGENTS = {**settings.NRLLM_AGENTS, "IN_DOUBT": "fail"}
    first_call = {"id": "call_1_1", "name": "calculator", "arguments": {"expression": "0 + 1"}}
    lost = died_running([request_step(), llm_step(1, tool_calls=[first_call])])
    effect = begun(pending_effect={"call": {"id": "c", "name": "slow_note", "arguments": {}}})
    spent = begun(attempts=2)
    alive = begun(expired=False)

    summary = reap()

    assert summary == (
        "1 requeued, 1 dead-lettered (not_retryable), 1 dead-lettered (retries_exhausted), "
        "0 cancel acknowledged, 0 skipped (alive)"
    )
    done = AgentRun.objects.get(pk=lost.pk)  # no waiting here: the command already did
    assert (done.status, done.final_text, done.attempts) == (RunStatus.COMPLETED, "done", 1)
    assert sequences(lost.pk) == list(range(len(sequences(lost.pk))))
    tool_ids = [e.payload["call_id"] for e in AgentRunEvent.objects.filter(run_id=lost.pk, kind="tool")]
    assert tool_ids == ["call_1_1", "call_2_1"]  # the pending call of round 1 ran once, in the continuation
    dead = {r.pk: r for r in AgentRun.objects.filter(pk__in=[effect.pk, spent.pk])}
    assert (dead[effect.pk].status, dead[effect.pk].termination_reason) == (RunStatus.FAILED, "not_retryable")
    assert (dead[spent.pk].status, dead[spent.pk].termination_reason) == (RunStatus.FAILED, "retries_exhausted")
    still = AgentRun.objects.get(pk=alive.pk)
    assert (still.status, still.claimed_by, still.attempts) == (RunStatus.RUNNING, alive.claimed_by, 0)
    assert reap() == "0 requeued, 0 cancel acknowledged, 0 skipped (alive)"  # nothing left to do


def test_a_reaped_run_whose_final_answer_was_recorded_completes_without_asking_the_model_again():
    """The worker died after recording the final answer and before settling the run."""
    lost = died_running([request_step(), llm_step(1, content="the answer")], script=[{"content": "the answer"}])

    assert reap() == "1 requeued, 0 cancel acknowledged, 0 skipped (alive)"

    run = AgentRun.objects.get(pk=lost.pk)
    assert (run.status, run.termination_reason, run.final_text) == (RunStatus.COMPLETED, "completed", "the answer")
    assert kinds(lost.pk) == ["request", "llm"]  # no second model call: the stream already held the answer
    assert run.iterations == 1


def test_dry_run_reports_and_changes_nothing():
    first_call = {"id": "call_1_1", "name": "calculator", "arguments": {"expression": "0 + 1"}}
    lost = died_running([request_step(), llm_step(1, tool_calls=[first_call])])
    spent = begun(attempts=2)
    before, events_before = snapshot(lost, spent), sequences(lost.pk)

    summary = reap("--dry-run")

    assert summary == (
        "would have: 1 requeued, 1 dead-lettered (retries_exhausted), 0 cancel acknowledged, 0 skipped (alive)"
    )
    assert snapshot(lost, spent) == before and sequences(lost.pk) == events_before
    assert reap().startswith("1 requeued, 1 dead-lettered (retries_exhausted)")  # the real pass still finds both


def test_limit_bounds_one_pass():
    runs = [begun(attempts=2), begun(attempts=2)]
    assert reap("--limit", "1").startswith("0 requeued, 1 dead-lettered (retries_exhausted)")
    assert sorted(AgentRun.objects.filter(pk__in=[r.pk for r in runs]).values_list("status", flat=True)) == [
        RunStatus.FAILED,
        RunStatus.RUNNING,
    ]
    assert reap("--limit", "1").startswith("0 requeued, 1 dead-lettered (retries_exhausted)")


@pytest.mark.parametrize("limit", ["0", "-3"])
def test_a_limit_below_one_is_a_usage_error(limit):
    stale = begun(attempts=2)
    with pytest.raises(CommandError) as caught:
        reap("--limit", limit)
    assert caught.value.returncode == 2 and "--limit" in str(caught.value)
    assert AgentRun.objects.get(pk=stale.pk).status == RunStatus.RUNNING  # nothing was reaped


def test_a_limit_below_one_exits_with_status_2_from_the_shell(child_env):
    from tests.conftest import manage

    proc = manage("agent_reap", "--limit", "0", env=child_env)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 2 and "--limit must be a positive integer" in err and out == ""
