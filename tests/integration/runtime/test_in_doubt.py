"""A call in doubt (issue 47): a run whose worker was lost during a non-idempotent,
non-transactional tool call is not failed. The reaper hands it back with the write fence's stamp;
the next segment suspends it, waiting like an approval, with the call named; a person says:

- *it happened*, with its result: recorded as the call's step, the call not made again;
- *it did not happen*: the call is made again;
- or cancels the run.

Each decision is an ``approval`` step (who, why, which call). ``IN_DOUBT = "fail"`` keeps the
old dead letter. The worker is "lost" by ``SystemExit`` from the tool after its effect: nothing
in the runtime handles it, as nothing would run after a SIGKILL.
"""

from __future__ import annotations

import uuid
from typing import Any, ClassVar

import pytest

from nrllm_agents import store
from nrllm_agents.executors import dispatch
from nrllm_agents.models import AgentRun, AgentRunEvent, CancelSource, RunStatus
from nrllm_agents.runtime.agent_runtime import ApprovalNotPending, DecisionMismatch, Outcome
from tests.integration.runs import expire, kinds

pytestmark = pytest.mark.django_db

CHARGE = [{"tool_calls": [{"name": "charge", "arguments": {"cents": 500}}]}, {"content": "charged"}]


class Charge:
    """A non-idempotent effect outside the database (no key): counts its executions; the first
    one's worker is lost after the effect, before its step is recorded."""

    name = "charge"
    description = "charge a card"
    parameters: ClassVar[dict[str, Any]] = {"type": "object", "properties": {"cents": {"type": "integer"}}}
    requires_approval = False
    idempotent = False
    made: ClassVar[int] = 0

    def __init__(self, run_id: uuid.UUID | None = None) -> None:
        self.run_id = run_id

    def execute(self, arguments: dict[str, Any]) -> Any:
        Charge.made += 1
        if Charge.made == 1:
            raise SystemExit("worker killed")  # after the effect, before its step
        return {"charge": f"ch_{Charge.made}"}


@pytest.fixture
def charge(settings, monkeypatch):
    settings.NRLLM_AGENTS = {**settings.NRLLM_AGENTS, "TOOLS": {"charge": f"{__name__}.Charge"}}
    monkeypatch.setattr(dispatch, "dispatch", lambda run_id, **kwargs: None)  # this test is the worker
    Charge.made = 0
    return Charge


def lost_in_doubt(runtime) -> uuid.UUID:
    """A run whose worker was lost during the charge, reaped and continued: now in doubt."""
    run_id = runtime.enqueue({"prompt": "charge it", "tools": ["charge"], "script": CHARGE})
    with pytest.raises(SystemExit):
        runtime.run_queued(run_id)
    expire(run_id)
    report = store.reap()
    assert (report.requeued, report.in_doubt, report.dead_lettered) == ([run_id], 1, {}), report.summary()
    assert "1 requeued (1 in doubt)" in report.summary()
    waiting = runtime.run_queued(run_id)
    assert waiting.outcome == Outcome.AWAITING_APPROVAL, waiting
    run = AgentRun.objects.get(pk=run_id)
    assert (run.status, run.pending_effect, run.attempts) == (RunStatus.WAITING_FOR_APPROVAL, None, 0)
    doubt = run.suspended_state["in_doubt"]
    assert doubt["call"]["name"] == "charge" and doubt["call"]["arguments"] == {"cents": 500} and doubt["at"]
    assert Charge.made == 1
    return run_id


def steps(run_id: uuid.UUID, kind: str) -> list[dict[str, Any]]:
    return list(
        AgentRunEvent.objects.filter(run_id=run_id, kind=kind).order_by("sequence").values_list("payload", flat=True)
    )


def test_it_happened_records_the_persons_result_and_makes_no_call(runtime, charge, admin_user):
    run_id = lost_in_doubt(runtime)
    done = runtime.resolve(run_id, True, result={"charge": "ch_seen_in_the_dashboard"}, by=admin_user, reason="seen")
    assert done.outcome == Outcome.COMPLETED and done.final_text == "charged", done
    assert Charge.made == 1  # not made again
    (tool,) = steps(run_id, "tool")
    assert tool["result"] == {"charge": "ch_seen_in_the_dashboard"} and tool["in_doubt"] == "happened"
    (decision,) = steps(run_id, "approval")
    assert decision["in_doubt"] == "happened" and decision["by"] == admin_user.username
    assert decision["reason"] == "seen" and decision["in_doubt_call"]["name"] == "charge"
    assert kinds(run_id) == ["request", "llm", "approval", "tool", "request", "llm"]


def test_it_did_not_happen_makes_the_call_again(runtime, charge):
    run_id = lost_in_doubt(runtime)
    done = runtime.resolve(run_id, False, reason="no charge in the dashboard")
    assert done.outcome == Outcome.COMPLETED, done
    assert Charge.made == 2
    (tool,) = steps(run_id, "tool")
    assert tool["result"] == {"charge": "ch_2"} and "in_doubt" not in tool
    (decision,) = steps(run_id, "approval")
    assert decision["in_doubt"] == "not_happened" and "result" not in decision


def test_a_decision_can_be_handed_to_a_worker(runtime, charge):
    run_id = lost_in_doubt(runtime)
    assert runtime.resolve(run_id, True, result="ok", queued=True).outcome == Outcome.QUEUED
    done = runtime.run_queued(run_id)
    assert done.outcome == Outcome.COMPLETED and steps(run_id, "tool")[0]["result"] == "ok"


def test_cancel_is_the_third_decision(runtime, charge):
    run_id = lost_in_doubt(runtime)
    assert runtime.cancel(run_id, source=CancelSource.API, reason="refund by hand").outcome == "cancelled"
    run = AgentRun.objects.get(pk=run_id)
    assert run.status == RunStatus.CANCELLED and kinds(run_id)[-1] == "cancelled"
    with pytest.raises(ApprovalNotPending):
        runtime.resolve(run_id, True, result="late")


def test_each_kind_of_wait_takes_only_its_own_decision(runtime, charge):
    run_id = lost_in_doubt(runtime)
    with pytest.raises(DecisionMismatch, match="in doubt"):
        runtime.approve(run_id, True)
    gated = runtime.run({"prompt": "note", "tools": ["write_note"], "script": NOTE})
    with pytest.raises(DecisionMismatch, match="approve or deny"):
        runtime.resolve(gated.run_id, True, result="x")
    assert AgentRun.objects.get(pk=run_id).status == RunStatus.WAITING_FOR_APPROVAL  # nothing changed


def test_a_decision_whose_worker_was_lost_is_not_made_twice(runtime, charge, monkeypatch):
    """The decision "it happened" is recorded, and the worker is lost before the call's step: the
    next segment records the person's result from the decision; the call is not made."""
    run_id = lost_in_doubt(runtime)

    def lost_after_the_decision(step):
        if step["kind"] == "tool":
            raise SystemExit("worker killed")

    with pytest.raises(SystemExit):
        runtime.resolve(run_id, True, result={"charge": "ch_1"}, queued=False, on_step=lost_after_the_decision)
    assert kinds(run_id) == ["request", "llm", "approval"]
    expire(run_id)
    assert store.reap().requeued == [run_id]
    done = runtime.run_queued(run_id)
    assert done.outcome == Outcome.COMPLETED and Charge.made == 1, done
    assert steps(run_id, "tool")[0]["result"] == {"charge": "ch_1"}


def test_in_doubt_fail_keeps_the_dead_letter(runtime, charge, settings):
    settings.NRLLM_AGENTS = {**settings.NRLLM_AGENTS, "IN_DOUBT": "fail"}
    run_id = runtime.enqueue({"prompt": "charge it", "tools": ["charge"], "script": CHARGE})
    with pytest.raises(SystemExit):
        runtime.run_queued(run_id)
    expire(run_id)
    assert store.reap().dead_lettered == {"not_retryable": 1}
    assert AgentRun.objects.get(pk=run_id).termination_reason == "not_retryable"


NOTE = [{"tool_calls": [{"name": "write_note", "arguments": {"title": "t", "body": "b"}}]}, {"content": "ok"}]
