"""``runtime.AgentRuntime`` called directly with the scripted provider: each segment's ladder
(complete, fail, retry, suspend, resume, cancel, lose the run, hand back) read from its
``RunResult`` and the stored row. Dispatch is replaced by a recorder: no worker runs here."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from django.utils import timezone

from nrllm_agents import store
from nrllm_agents.domain import ProviderError, Usage
from nrllm_agents.executors import dispatch
from nrllm_agents.models import AgentRun, CancelSource, Note, RunStatus
from nrllm_agents.runtime import segment
from nrllm_agents.runtime.agent_runtime import ApprovalNotPending, CancelOutcome, InvalidRunId, Outcome, RunNotFound
from nrllm_agents.store.retries import RetryPolicy
from nrllm_agents.validation.run_request import InvalidRequest
from tests.integration.runs import kinds, row, running, stream, waiting

pytestmark = pytest.mark.django_db

ANSWER = [{"content": "42", "usage": {"prompt_tokens": 5, "completion_tokens": 2}}]
ONE_TOOL = [
    {"tool_calls": [{"name": "calculator", "arguments": {"expression": "6*7"}}], "usage": {"prompt_tokens": 3}},
    {"content": "42", "usage": {"prompt_tokens": 4, "completion_tokens": 1}},
]
GATED = [
    {"tool_calls": [{"name": "write_note", "arguments": {"title": "t", "body": "b"}}]},
    {"content": "noted"},
]


def request(script=ANSWER, tools=("calculator",), **extra):
    return {"prompt": "p", "tools": list(tools), "script": script, **extra}


def gated(**extra):
    return request(GATED, tools=("write_note",), **extra)


class Failing:
    """A model server that answers every call with an error."""

    name, model = "failing", "m"

    def __init__(self, retryable: bool) -> None:
        self.retryable = retryable

    def complete(self, messages, tools, context=None):
        raise ProviderError("upstream 503", retryable=self.retryable, status_code=503)


def transient_provider(request, run_id=None):
    return Failing(True)


def permanent_provider(request, run_id=None):
    return Failing(False)


def broken_provider(request, run_id=None):
    raise RuntimeError("a bug in the provider's factory")


@pytest.fixture(autouse=True)
def providers(settings):
    settings.NRLLM_AGENTS = {
        "PROVIDERS": {
            "transient": f"{__name__}.transient_provider",
            "permanent": f"{__name__}.permanent_provider",
            "broken": f"{__name__}.broken_provider",
        }
    }


@pytest.fixture
def dispatched(monkeypatch):
    """The jobs the runtime sent to its executor, as ``(run_id, delay_seconds, segment)``."""
    sent = []
    monkeypatch.setattr(
        dispatch,
        "dispatch",
        lambda run_id, *, delay_seconds=0, segment=None: sent.append((run_id, delay_seconds, segment)),
    )
    return sent


@pytest.fixture
def queue_down(monkeypatch):
    def refuse(run_id, **kwargs):
        raise ConnectionError("queue unreachable")

    monkeypatch.setattr(dispatch, "dispatch", refuse)


@pytest.fixture
def shutdown():
    yield segment.shutdown_requested
    segment.shutdown_requested.clear()


def take(run_id, *, requeue=None):
    """Another segment takes the run: the reaper hands it back, a worker claims it."""
    assert (requeue or store.requeue)(run_id, row(run_id).claimed_by, count_attempt=False).applied
    assert store.claim_queued(run_id, claimed_by="worker:elsewhere").applied


def before(monkeypatch, write, action):
    """``store.<write>`` of the segment runs ``action(run_id)`` first: what another actor does
    between the segment's last boundary and that write."""
    real = getattr(store, write)

    def racing(run_id, *args, **kwargs):
        action(run_id)
        return real(run_id, *args, **kwargs)

    monkeypatch.setattr(store, write, racing)
    return real


# --- run here ----------------------------------------------------------------------------
def test_run_completes_and_reports_its_spend(runtime):
    result = runtime.run(request(ONE_TOOL))
    assert (result.outcome, result.status, result.termination_reason) == ("completed", "completed", "completed")
    assert result.final_text == "42" and result.steps == 5 and result.iterations == 2
    assert (result.usage.prompt_tokens, result.usage.completion_tokens) == (7, 1)
    assert kinds(result.run_id) == ["request", "llm", "tool", "request", "llm"]


def test_a_bad_request_is_refused_before_any_row_is_written(runtime):
    with pytest.raises(InvalidRequest):
        runtime.run({"prompt": ""})
    assert not AgentRun.objects.exists()


def test_the_iteration_cap_fails_the_run(runtime):
    result = runtime.run(request(ONE_TOOL, max_iterations=1))
    assert (result.outcome, result.status, result.termination_reason) == ("failed", "failed", "max_iterations")


def test_a_provider_error_fails_an_interactive_run_at_once(runtime):
    result = runtime.run(request(provider="transient", script=None))
    assert (result.outcome, result.termination_reason) == ("failed", "provider_failed")
    assert result.error == "ProviderError: upstream 503" and row(result.run_id).attempts == 0


def test_an_unexpected_error_settles_the_run_failed(runtime, caplog):
    result = runtime.run(request(provider="broken", script=None))
    assert (result.outcome, result.termination_reason) == ("failed", "internal_error")
    assert result.error == "RuntimeError: a bug in the provider's factory" and "unexpected error" in caplog.text


def test_a_settle_refused_after_a_cancel_reports_cancelled(runtime, monkeypatch):
    before(monkeypatch, "settle", lambda run_id: runtime.cancel(run_id, source=CancelSource.SYSTEM))
    result = runtime.run(request())
    assert (result.outcome, result.status) == ("cancelled", "cancelled")
    assert kinds(result.run_id) == ["request", "llm", "cancelled"] and row(result.run_id).final_text == ""


def test_a_settle_refused_because_the_run_was_taken_reports_the_loss(runtime, monkeypatch):
    before(monkeypatch, "settle", take)
    result = runtime.run(request())
    assert result.outcome == Outcome.LEASE_LOST and result.status == RunStatus.RUNNING


def test_a_run_taken_mid_way_stops_without_writing(runtime):
    def take_at_the_llm_step(data):
        if data["kind"] == "llm":
            take(uuid.UUID(data["run_id"]))

    result = runtime.run(request(ONE_TOOL), on_step=take_at_the_llm_step)
    # The status is the row's as it is now: running, in the hands of the segment that took it.
    assert (result.outcome, result.status, result.steps) == (Outcome.LEASE_LOST, RunStatus.RUNNING, 1)
    assert kinds(result.run_id) == ["request"] and row(result.run_id).claimed_by == "worker:elsewhere"


def test_a_cancel_while_executing_stops_at_the_boundary(runtime):
    def cancel_at_the_tool(data):
        if data["kind"] == "tool":
            runtime.cancel(data["run_id"], source=CancelSource.API, reason="enough")

    result = runtime.run(request(ONE_TOOL), on_step=cancel_at_the_tool)
    assert (result.outcome, result.status, result.termination_reason) == ("cancelled", "cancelled", "cancelled")
    assert kinds(result.run_id) == ["request", "llm", "tool", "cancelled"]
    assert stream(result.run_id)[-1].payload["boundary_sequence"] == 2


# --- suspend and resume ------------------------------------------------------------------
def test_a_gated_call_suspends_the_run_with_its_pending_calls(runtime):
    result = runtime.run(gated())
    assert (result.outcome, result.status) == (Outcome.AWAITING_APPROVAL, RunStatus.WAITING_FOR_APPROVAL)
    assert [c["name"] for c in result.pending_calls] == ["write_note"]
    assert row(result.run_id).claimed_by == "" and not Note.objects.exists()


def test_approve_resumes_here_and_runs_the_gated_call(runtime, alice):
    first = runtime.run(gated())
    done = runtime.approve(str(first.run_id), True, by=alice)
    assert (done.outcome, done.final_text) == ("completed", "noted")
    assert Note.objects.filter(run_id=first.run_id).count() == 1
    approval = [e for e in stream(first.run_id) if e.kind == "approval"][0]
    assert approval.payload["approved"] is True and approval.payload["by"] == "alice"


def test_a_denial_with_on_deny_stop_ends_the_run(runtime):
    first = runtime.run(gated(on_deny="stop"))
    denied = runtime.approve(first.run_id, False)
    assert (denied.outcome, denied.status, denied.termination_reason) == ("completed", "completed", "approval_denied")
    assert not Note.objects.exists()


def test_approve_queued_stores_the_decision_and_a_worker_resumes_it(runtime, dispatched):
    first = runtime.run(gated())
    handed = runtime.approve(first.run_id, True, queued=True)
    assert (handed.outcome, handed.status, handed.steps) == (Outcome.QUEUED, RunStatus.QUEUED, 0)
    assert [d[0] for d in dispatched] == [first.run_id]
    resumed = runtime.run_queued(first.run_id)
    assert resumed.outcome == Outcome.COMPLETED and Note.objects.filter(run_id=first.run_id).count() == 1


def test_approve_queued_with_the_queue_down_leaves_the_run_queued(runtime, queue_down):
    first = runtime.run(gated())
    handed = runtime.approve(first.run_id, True, queued=True)
    assert (handed.outcome, handed.status) == (Outcome.WAITING_FOR_QUEUE, RunStatus.QUEUED)
    stored = row(first.run_id)
    assert (stored.status, stored.termination_reason) == ("queued", "")
    assert stored.request_payload["resume"]["approved"] is True  # the decision waits with it


def test_approve_queued_with_a_queue_that_refuses_for_good_settles_the_run(runtime, monkeypatch):
    def refuse(run_id, **kwargs):
        raise ValueError("not a queue")

    monkeypatch.setattr(dispatch, "dispatch", refuse)
    first = runtime.run(gated())
    with pytest.raises(dispatch.EnqueueError, match="not a queue"):
        runtime.approve(first.run_id, True, queued=True)
    stored = row(first.run_id)
    assert (stored.status, stored.termination_reason) == ("failed", "enqueue_failed")


@pytest.mark.parametrize(
    "run_id, error",
    [("not-a-uuid", InvalidRunId), ("00000000-0000-0000-0000-000000000000", RunNotFound)],
)
def test_approve_of_no_run_is_refused(runtime, run_id, error):
    with pytest.raises(error):
        runtime.approve(run_id, True)


def test_approve_of_a_run_that_is_not_waiting_is_refused(runtime):
    with pytest.raises(ApprovalNotPending, match="running, not waiting"):
        runtime.approve(running(), True)


def test_a_suspended_state_that_cannot_be_read_settles_the_run_failed(runtime):
    run_id = waiting(state={"pending_calls": []})  # no messages: it cannot be resumed
    result = runtime.approve(run_id, True)
    assert (result.outcome, result.termination_reason) == ("failed", "invalid_request")
    assert result.error.startswith("KeyError")


def test_a_suspend_refused_after_a_cancel_reports_cancelled(runtime, monkeypatch):
    before(monkeypatch, "suspend", lambda run_id: runtime.cancel(run_id, source=CancelSource.SYSTEM))
    result = runtime.run(gated())
    assert result.outcome == Outcome.CANCELLED and kinds(result.run_id)[-1] == "cancelled"


def test_a_suspend_refused_because_the_run_already_waits_reports_it(runtime, monkeypatch):
    real = store.suspend
    state = {"messages": [], "pending_calls": [{"id": "c", "name": "write_note", "arguments": {}}]}
    before(monkeypatch, "suspend", lambda run_id: real(run_id, state=state, iterations=1, usage=Usage(), owner=None))
    result = runtime.run(gated())
    assert (result.outcome, result.status) == (Outcome.SUSPEND_FAILED, RunStatus.WAITING_FOR_APPROVAL)


# --- queued segments ---------------------------------------------------------------------
def test_enqueue_stores_the_run_and_dispatches_it_after_commit(runtime, dispatched, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        run_id = runtime.enqueue(request())
        assert dispatched == []
    assert dispatched == [(run_id, 0, 0)] and row(run_id).status == RunStatus.QUEUED


def test_an_enqueue_during_an_outage_inside_a_transaction_leaves_the_run_queued_and_logs(
    runtime, queue_down, django_capture_on_commit_callbacks, caplog
):
    with django_capture_on_commit_callbacks(execute=True):
        run_id = runtime.enqueue(request())
    assert row(run_id).status == RunStatus.QUEUED and "the queue is unreachable" in caplog.text


def test_run_queued_claims_and_completes_and_a_second_delivery_does_nothing(runtime, dispatched):
    run_id = runtime.enqueue(request(ONE_TOOL))
    result = runtime.run_queued(str(run_id))
    assert result.outcome == Outcome.COMPLETED and result.steps == 5
    assert runtime.run_queued(run_id) is None and len(stream(run_id)) == 5


def test_a_run_cancelled_before_its_claim_never_executes(runtime, dispatched):
    run_id = runtime.enqueue(request())
    runtime.cancel(run_id, source=CancelSource.API)
    assert runtime.run_queued(run_id) is None and kinds(run_id) == ["cancelled"]


def test_a_stored_request_that_cannot_be_rehydrated_settles_failed(runtime):
    run_id = store.create_queued({"prompt": "p", "provider": "scripted"}, {"prompt": ""}).pk
    result = runtime.run_queued(run_id)
    assert (result.outcome, result.termination_reason) == ("failed", "invalid_request")


def test_a_transient_provider_error_requeues_with_a_backoff(runtime, dispatched):
    run_id = runtime.enqueue(request(provider="transient", script=None))
    dispatched.clear()
    result = runtime.run_queued(run_id)
    assert (result.outcome, result.status) == (Outcome.REQUEUED, RunStatus.QUEUED)
    assert dispatched == [(run_id, RetryPolicy.from_settings().delay(0), None)]
    stored = row(run_id)
    assert stored.attempts == 1 and stored.request_payload == store.RECOVER and stored.error_class == "ProviderError"


def test_a_transient_error_past_the_retry_budget_fails_the_run(runtime, dispatched, settings):
    settings.NRLLM_AGENTS = {**settings.NRLLM_AGENTS, "MAX_ATTEMPTS": 0}
    run_id = runtime.enqueue(request(provider="transient", script=None))
    result = runtime.run_queued(run_id)
    assert (result.outcome, result.termination_reason) == ("failed", "retries_exhausted")


def test_a_permanent_provider_error_fails_a_queued_run_at_once(runtime, dispatched):
    run_id = runtime.enqueue(request(provider="permanent", script=None))
    result = runtime.run_queued(run_id)
    assert (result.outcome, result.termination_reason) == ("failed", "not_retryable")
    assert row(run_id).attempts == 0


def test_a_retry_that_meets_a_queue_outage_stays_queued(runtime, queue_down):
    run_id = store.create_queued(
        {"prompt": "p", "provider": "transient"}, {"prompt": "p", "provider": "transient", "tools": []}
    ).pk
    result = runtime.run_queued(run_id)
    assert (result.outcome, result.status, result.termination_reason) == ("requeued", "queued", "")


def test_a_retry_refused_after_a_cancel_reports_cancelled(runtime, dispatched, monkeypatch):
    before(monkeypatch, "requeue", lambda run_id: runtime.cancel(run_id, source=CancelSource.SYSTEM))
    run_id = runtime.enqueue(request(provider="transient", script=None))
    dispatched.clear()
    result = runtime.run_queued(run_id)
    assert result.outcome == Outcome.CANCELLED and kinds(run_id)[-1] == "cancelled" and dispatched == []


def test_a_retry_refused_because_the_run_was_taken_reports_the_loss(runtime, dispatched, monkeypatch):
    real = store.requeue
    before(monkeypatch, "requeue", lambda run_id: take(run_id, requeue=real))
    run_id = runtime.enqueue(request(provider="transient", script=None))
    result = runtime.run_queued(run_id)
    assert (result.outcome, result.status) == (Outcome.LEASE_LOST, RunStatus.RUNNING)


def test_a_shutdown_hands_the_run_back_and_the_next_worker_continues_from_its_stream(runtime, dispatched, shutdown):
    run_id = runtime.enqueue(request(ONE_TOOL))
    dispatched.clear()

    def shut_down_at_the_tool(data):
        if data["kind"] == "tool":
            shutdown.set()  # checked once the step is recorded

    handed = runtime.run_queued(run_id, on_step=shut_down_at_the_tool)
    assert (handed.outcome, handed.steps) == (Outcome.REQUEUED, 3) and dispatched == [(run_id, 0.0, None)]
    assert row(run_id).attempts == 0  # a shutdown is not a failed attempt
    shutdown.clear()
    done = runtime.run_queued(run_id)
    assert done.outcome == Outcome.COMPLETED and done.steps == 2 and done.final_text == "42"
    assert kinds(run_id) == ["request", "llm", "tool", "request", "llm"]


def test_a_hand_back_between_steps_requeues_without_counting_an_attempt(runtime, dispatched, shutdown):
    run_id = runtime.enqueue(request(ONE_TOOL))

    def hand_back_at_the_llm_step(data):
        if data["kind"] == "llm":
            segment.hand_back_all()

    result = runtime.run_queued(run_id, on_step=hand_back_at_the_llm_step)
    assert (result.outcome, result.status) == (Outcome.REQUEUED, RunStatus.QUEUED)
    assert kinds(run_id) == ["request", "llm"] and row(run_id).attempts == 0


# --- fork --------------------------------------------------------------------------------
def test_a_fork_is_queued_with_its_transcript_as_its_first_step(
    runtime, dispatched, django_capture_on_commit_callbacks
):
    parent = runtime.run(request(ONE_TOOL))
    with django_capture_on_commit_callbacks(execute=True):
        fork = runtime.fork(parent.run_id, from_sequence=2)
    assert (fork.outcome, fork.status, fork.steps) == (Outcome.QUEUED, RunStatus.QUEUED, 1)
    assert kinds(fork.run_id) == ["forked"] and [d[0] for d in dispatched] == [fork.run_id]
    assert row(fork.run_id).parent_id == parent.run_id


def test_a_fork_run_here_continues_from_the_copied_transcript(runtime):
    parent = runtime.run(request(ONE_TOOL))
    fork = runtime.fork(parent.run_id, from_sequence=2, queued=False, overrides={"script": [{"content": "43"}] * 2})
    assert (fork.outcome, fork.final_text) == (Outcome.COMPLETED, "43")
    assert kinds(fork.run_id) == ["forked", "request", "llm"]


# --- cancel, reap and reads --------------------------------------------------------------
def test_cancel_of_a_quiescent_run_stops_it_at_once(runtime, dispatched):
    run_id = runtime.enqueue(request())
    result = runtime.cancel(run_id, source=CancelSource.API, reason="r")
    assert (result.outcome, result.status, result.previous_status) == ("cancelled", "cancelled", "queued")
    assert not result.was_executing and kinds(run_id) == ["cancelled"]


def test_cancel_of_an_executing_run_leaves_the_stop_to_its_segment(runtime):
    run_id = running()
    result = runtime.cancel(run_id, source=CancelSource.API)
    assert result.outcome == CancelOutcome.CANCELLED and result.was_executing
    assert row(run_id).stopped_at is None and kinds(run_id) == []


def test_cancel_says_what_it_found_when_it_changes_nothing(runtime):
    done = runtime.run(request())
    cancelled = runtime.run(gated()).run_id
    runtime.cancel(cancelled, source=CancelSource.API)
    assert runtime.cancel(done.run_id, source=CancelSource.API).outcome == CancelOutcome.ALREADY_FINISHED
    assert runtime.cancel(cancelled, source=CancelSource.API).outcome == CancelOutcome.ALREADY_CANCELLED
    missing = runtime.cancel(uuid.uuid4(), source=CancelSource.API)
    assert (missing.outcome, missing.status) == (CancelOutcome.NOT_FOUND, None)


def test_cancel_refuses_an_unrecordable_reason(runtime):
    with pytest.raises(store.InvalidArgument):
        runtime.cancel(running(), source=CancelSource.API, reason="\x00")


def test_cancel_many_cancels_the_selection(runtime):
    run_ids = [running(), runtime.run(gated()).run_id]
    result = runtime.cancel_many(AgentRun.objects.filter(pk__in=run_ids), source=CancelSource.ADMIN)
    assert result.cancelled == {"running": 1, "waiting_for_approval": 1}


def test_reap_requeues_a_dead_segments_run_and_dispatches_it(runtime, dispatched):
    run_id = running()
    AgentRun.objects.filter(pk=run_id).update(lease_expires=timezone.now() - timedelta(minutes=1))
    report = runtime.reap()
    assert report.requeued == [run_id] and dispatched == [(run_id, 0, None)]


def test_a_reaped_run_that_meets_a_queue_outage_stays_queued_for_the_sweep(runtime, queue_down, caplog):
    run_id = running()
    AgentRun.objects.filter(pk=run_id).update(lease_expires=timezone.now() - timedelta(minutes=1))
    assert runtime.reap().requeued == [run_id]
    assert row(run_id).status == RunStatus.QUEUED and "the queue is unreachable" in caplog.text


def test_a_dry_reap_dispatches_nothing(runtime, dispatched):
    run_id = running()
    AgentRun.objects.filter(pk=run_id).update(lease_expires=timezone.now() - timedelta(minutes=1))
    assert runtime.reap(dry_run=True).requeued == [run_id] and dispatched == []


def test_status_and_events_read_the_run(runtime):
    result = runtime.run(request(ONE_TOOL))
    assert runtime.status(str(result.run_id)).status == RunStatus.COMPLETED
    assert [e.sequence for e in runtime.events(result.run_id, after=2, limit=1)] == [3]
    with pytest.raises(RunNotFound):
        runtime.status(uuid.uuid4())
