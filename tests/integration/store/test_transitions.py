"""The status fences of ``store.runs`` called directly, one behaviour each.

Fences with a PostgreSQL statement of their own (claim, cancel) run through it and through the
portable read-check-write fence (``store_path``).
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from nrllm_agents import store
from nrllm_agents.domain import StepKind, Usage
from nrllm_agents.models import AgentRunEvent, RunStatus, TerminationReason
from tests.integration.runs import (
    FIELDS,
    OTHER,
    OWNER,
    RUN_READ,
    completed,
    failing,
    kinds,
    queued,
    row,
    running,
    step,
    stream,
    waiting,
)

pytestmark = pytest.mark.django_db
MISSING = "00000000-0000-0000-0000-000000000000"


# --- births ------------------------------------------------------------------------------
def test_begin_inserts_a_running_run_owned_by_its_segment():
    until = store.lease_until()
    run = store.begin(dict(FIELDS), claimed_by=OWNER, lease_expires=until)
    stored = row(run.pk)
    assert (stored.status, stored.claimed_by, stored.lease_expires) == (RunStatus.RUNNING, OWNER, until)
    assert stored.started_at is not None and stored.request_payload is None


def test_create_queued_stores_the_request_for_the_worker():
    stored = row(queued({"prompt": "hello"}))
    assert stored.status == RunStatus.QUEUED and stored.request_payload == {"prompt": "hello"}
    assert stored.started_at is None and stored.claimed_by == ""


# --- claims ------------------------------------------------------------------------------
def test_claim_queued_moves_it_to_running_with_its_request(store_path):
    run_id = queued({"prompt": "hello"})
    claim = store.claim_queued(run_id, claimed_by=OWNER, lease_expires=store.lease_until())
    assert (claim.applied, claim.status, claim.previous) == (True, RunStatus.RUNNING, RunStatus.QUEUED)
    assert claim.data["request_payload"] == {"prompt": "hello"}
    stored = row(run_id)
    assert stored.status == RunStatus.RUNNING and stored.claimed_by == OWNER and stored.started_at is not None


@pytest.mark.postgres_only
def test_the_one_trip_claim_also_says_where_the_stream_goes_on():
    run_id = running(steps=3)
    assert store.requeue(run_id, OWNER, count_attempt=False).applied
    claim = store.claim_queued(run_id, claimed_by=OTHER)
    assert claim.applied and claim.data["next_sequence"] == 3 == store.next_sequence(run_id)
    assert claim.data["request_payload"] == store.RECOVER


def test_a_second_claim_loses_and_writes_nothing(store_path):
    run_id = queued()
    assert store.claim_queued(run_id, claimed_by=OWNER).applied
    second = store.claim_queued(run_id, claimed_by=OTHER)
    assert (second.applied, second.status, second.previous) == (False, RunStatus.RUNNING, RunStatus.RUNNING)
    assert row(run_id).claimed_by == OWNER


def test_a_cancelled_queued_run_cannot_be_claimed(store_path):
    run_id = queued()
    store.cancel(run_id, source="system")
    claim = store.claim_queued(run_id, claimed_by=OWNER)
    assert not claim.applied and claim.status == RunStatus.CANCELLED


def test_claiming_a_missing_run_finds_nothing(store_path):
    assert store.claim_queued(MISSING, claimed_by=OWNER) == store.NOT_FOUND


def test_claim_for_resume_returns_the_suspended_state():
    run_id = waiting(state={"messages": [{"role": "user"}], "pending_calls": []})
    claim = store.claim_for_resume(run_id, claimed_by=OTHER, lease_expires=store.lease_until())
    assert claim.applied and claim.previous == RunStatus.WAITING_FOR_APPROVAL
    assert claim.data["suspended_state"]["messages"] == [{"role": "user"}]
    assert row(run_id).claimed_by == OTHER


def test_a_second_resume_loses():
    run_id = waiting()
    assert store.claim_for_resume(run_id, claimed_by=OWNER).applied
    second = store.claim_for_resume(run_id, claimed_by=OTHER)
    assert (second.applied, second.status) == (False, RunStatus.RUNNING)


def test_the_wait_for_approval_does_not_count_against_the_deadline():
    deadline = timezone.now() + timedelta(minutes=5)
    run_id = waiting(deadline_at=deadline)
    AgentRunEvent.objects.filter(run_id=run_id).update(created_at=timezone.now() - timedelta(minutes=10))
    assert store.claim_for_resume(run_id, claimed_by=OWNER).applied
    assert row(run_id).deadline_at >= deadline + timedelta(minutes=10)


def test_a_run_without_a_deadline_keeps_none_after_the_wait():
    run_id = waiting()
    AgentRunEvent.objects.filter(run_id=run_id).update(created_at=timezone.now() - timedelta(minutes=10))
    assert store.requeue_for_resume(run_id, {"resume": {"approved": True}}).applied
    assert row(run_id).deadline_at is None


def test_requeue_for_resume_stores_the_decision_for_a_worker():
    run_id = waiting(deadline_at=timezone.now())
    moved = store.requeue_for_resume(run_id, {"resume": {"approved": False, "by": "alice"}})
    assert (moved.applied, moved.status, moved.previous) == (True, RunStatus.QUEUED, RunStatus.WAITING_FOR_APPROVAL)
    assert row(run_id).request_payload == {"resume": {"approved": False, "by": "alice"}}


def test_requeue_for_resume_refuses_a_run_that_is_not_waiting():
    moved = store.requeue_for_resume(running(), {"resume": {}})
    assert (moved.applied, moved.status) == (False, RunStatus.RUNNING)
    assert store.requeue_for_resume(MISSING, {}) == store.NOT_FOUND


# --- suspend and settle ------------------------------------------------------------------
def test_suspend_stores_the_state_and_releases_the_lease():
    run_id = running()
    fence = store.suspend(run_id, state={"round": 2}, iterations=2, usage=Usage(5, 6), owner=OWNER)
    assert (fence.applied, fence.status, fence.previous) == (True, RunStatus.WAITING_FOR_APPROVAL, RunStatus.RUNNING)
    stored = row(run_id)
    assert stored.suspended_state == {"round": 2} and (stored.prompt_tokens, stored.completion_tokens) == (5, 6)
    assert stored.claimed_by == "" and stored.lease_expires is None and stored.iterations == 2


def test_suspend_by_a_segment_that_does_not_own_the_run_is_refused():
    run_id = running()
    fence = store.suspend(run_id, state={}, iterations=0, usage=Usage(), owner=OTHER)
    assert (fence.applied, fence.status, fence.previous) == (False, RunStatus.RUNNING, RunStatus.RUNNING)
    assert row(run_id).suspended_state is None


def test_settle_by_the_owner_records_the_end():
    run_id = running()
    fence = store.settle(
        run_id,
        status=RunStatus.COMPLETED,
        reason="completed",
        iterations=3,
        usage=Usage(1, 2),
        final_text="42",
        owner=OWNER,
    )
    assert fence.applied and fence.status == RunStatus.COMPLETED
    stored = row(run_id)
    assert (stored.final_text, stored.iterations, stored.total_tokens) == ("42", 3, 3)
    assert stored.finished_at is not None and stored.lease_expires is None and stored.pending_effect is None


def test_settle_refuses_a_status_that_is_not_an_end():
    with pytest.raises(store.InvalidArgument, match="completed or failed"):
        store.settle(running(), status=RunStatus.CANCELLED, reason="cancelled", owner=OWNER)


def test_settle_after_a_cancel_is_refused_and_says_cancelled():
    run_id = running()
    store.cancel(run_id, source="system")
    fence = store.settle(run_id, status=RunStatus.COMPLETED, reason="completed", final_text="late", owner=OWNER)
    assert (fence.applied, fence.status) == (False, RunStatus.CANCELLED)
    assert row(run_id).final_text == ""


def test_settle_by_a_segment_that_lost_the_run_writes_nothing():
    run_id = running()
    fence = store.settle(run_id, status=RunStatus.FAILED, reason="internal_error", owner=OTHER)
    assert (fence.applied, fence.status) == (False, RunStatus.RUNNING)


def test_settle_without_owner_ends_a_queued_run_and_keeps_a_bounded_message():
    run_id = queued()
    fence = store.settle(
        run_id,
        status=RunStatus.FAILED,
        reason=TerminationReason.ENQUEUE_FAILED,
        error_class="E",
        error_message="x" * 5000,
    )
    assert fence.applied
    stored = row(run_id)
    assert stored.termination_reason == "enqueue_failed" and len(stored.error_message) == 2000
    assert stored.request_payload is None


def test_settling_a_missing_run_finds_nothing():
    fence = store.settle(MISSING, status=RunStatus.FAILED, reason="internal_error")
    assert not fence.found and not fence.applied


# --- cancel ------------------------------------------------------------------------------
def test_cancelling_a_queued_run_appends_the_cancelled_step(store_path, alice):
    run_id = queued()
    fence = store.cancel(run_id, by=alice, source="api", reason="no longer needed")
    assert (fence.applied, fence.status, fence.previous) == (True, RunStatus.CANCELLED, RunStatus.QUEUED)
    stored = row(run_id)
    assert stored.stopped_at == stored.cancel_requested_at == stored.finished_at is not None
    assert stored.request_payload is None and stored.cancelled_by == alice
    (ack,) = stream(run_id)
    assert (ack.sequence, ack.kind) == (0, StepKind.CANCELLED)
    assert ack.payload["by"] == "alice" and ack.payload["reason"] == "no longer needed"
    assert ack.payload["boundary_sequence"] is None and ack.payload["source"] == "api"


def test_cancelling_a_waiting_run_names_its_last_step_as_the_boundary(store_path):
    run_id = waiting(steps=2)
    fence = store.cancel(run_id, source="cli")
    assert fence.applied and fence.previous == RunStatus.WAITING_FOR_APPROVAL
    assert kinds(run_id) == ["request", "request", "cancelled"]
    ack = stream(run_id)[-1]
    assert ack.payload["boundary_sequence"] == 1 and ack.payload["termination_reason"] == "cancelled"
    assert row(run_id).suspended_state is None


def test_cancelling_a_running_run_leaves_the_acknowledgement_to_its_segment(store_path):
    run_id = running(steps=1)
    lease = row(run_id).lease_expires
    fence = store.cancel(run_id, source="admin")
    assert fence.applied and fence.previous == RunStatus.RUNNING
    stored = row(run_id)
    assert stored.status == RunStatus.CANCELLED and stored.stopped_at is None
    assert stored.claimed_by == OWNER and stored.lease_expires == lease
    assert kinds(run_id) == ["request"]


def test_a_limits_cancel_records_what_it_measured(store_path):
    run_id = queued()
    detail = {"limit": "budget", "value": 10, "measured": 12, "unit": "tokens"}
    store.cancel(run_id, source="system", termination_reason=TerminationReason.BUDGET_EXCEEDED, detail=detail)
    ack = stream(run_id)[-1]
    assert ack.payload["limit"] == detail and ack.payload["termination_reason"] == "budget_exceeded"
    assert row(run_id).cancel_detail == detail


def test_a_second_cancel_loses(store_path):
    run_id = queued()
    assert store.cancel(run_id, source="api").applied
    second = store.cancel(run_id, source="cli")
    assert (second.applied, second.status, second.previous) == (False, RunStatus.CANCELLED, RunStatus.CANCELLED)
    assert kinds(run_id) == ["cancelled"] and row(run_id).cancel_source == "api"


def test_a_finished_run_cannot_be_cancelled(store_path):
    run_id = completed()
    fence = store.cancel(run_id, source="api")
    assert (fence.applied, fence.status) == (False, RunStatus.COMPLETED)
    assert row(run_id).cancel_requested_at is None


def test_cancelling_a_missing_run_finds_nothing(store_path):
    assert store.cancel(MISSING, source="api") == store.NOT_FOUND


def test_an_unrecordable_reason_is_refused_before_anything_is_written(store_path):
    run_id = queued()
    with pytest.raises(store.InvalidArgument, match="longer than"):
        store.cancel(run_id, source="api", reason="x" * (store.MAX_REASON_CHARS + 1))
    assert row(run_id).status == RunStatus.QUEUED


# --- acknowledge -------------------------------------------------------------------------
def cancelled_while_running(steps: int = 2):
    run_id = running(steps=steps)
    store.cancel(run_id, source="api", reason="stop")
    return run_id


def test_acknowledge_cancel_appends_the_step_and_records_the_spend():
    run_id = cancelled_while_running()
    ack = store.acknowledge_cancel(run_id, sequence=2, round=1, iterations=1, usage=Usage(7, 8), owner=OWNER)
    assert (ack.applied, ack.status) == (True, RunStatus.CANCELLED)
    event = ack.data["event"]
    assert (event.sequence, event.kind, event.round) == (2, StepKind.CANCELLED, 1)
    assert event.payload["boundary_sequence"] == 1 and event.payload["reason"] == "stop"
    assert stream(run_id)[-1].round == 1  # the round is stored, not only set on the returned event
    stored = row(run_id)
    assert (
        stored.stopped_at is not None
        and stored.claimed_by == ""
        and (stored.prompt_tokens, stored.completion_tokens) == (7, 8)
    )


def test_acknowledge_cancel_names_the_step_the_cancel_cut_short():
    run_id = cancelled_while_running()
    ack = store.acknowledge_cancel(run_id, sequence=2, round=0, iterations=0, usage=Usage(), interrupted_sequence=1)
    assert ack.data["event"].payload["interrupted"] is True
    assert stream(run_id)[-1].payload["interrupted_sequence"] == 1


def test_acknowledge_cancel_happens_once():
    run_id = cancelled_while_running()
    assert store.acknowledge_cancel(run_id, sequence=2, round=0, iterations=0, usage=Usage(), owner=OWNER).applied
    again = store.acknowledge_cancel(run_id, sequence=3, round=0, iterations=0, usage=Usage(), owner=OWNER)
    assert (again.applied, again.data) == (False, {})
    assert kinds(run_id).count("cancelled") == 1


def test_a_segment_that_lost_the_run_does_not_acknowledge_for_it():
    run_id = cancelled_while_running()
    ack = store.acknowledge_cancel(run_id, sequence=2, round=0, iterations=0, usage=Usage(), owner=OTHER)
    assert not ack.applied and row(run_id).stopped_at is None


def test_a_run_that_is_not_cancelled_is_not_acknowledged():
    run_id = running()
    assert not store.acknowledge_cancel(run_id, sequence=0, round=0, iterations=0, usage=Usage()).applied
    assert kinds(run_id) == []


# --- reads -------------------------------------------------------------------------------
def test_probe_status_reads_the_row_and_none_for_a_missing_run():
    assert store.probe_status(queued()) == RunStatus.QUEUED
    assert store.probe_status(MISSING) is None


def test_a_failing_probe_answers_unknown_never_cancelled(caplog):
    run_id = running()
    with failing(RUN_READ) as failed:
        assert store.probe_status(run_id) is None
    assert failed and "treating as not cancelled" in caplog.text


def test_a_strict_probe_raises_the_failure():
    from django.db import OperationalError

    with failing(RUN_READ), pytest.raises(OperationalError):
        store.probe_status(running(), fail_soft=False)


def test_events_reads_the_stream_after_a_sequence_up_to_a_limit():
    run_id = running(steps=4)
    assert [e.sequence for e in store.events(run_id)] == [0, 1, 2, 3]
    assert [e.sequence for e in store.events(run_id, after=0, limit=2)] == [1, 2]


def test_next_sequence_follows_the_last_recorded_step():
    run_id = running()
    assert store.next_sequence(run_id) == 0
    store.append_event(run_id, 0, step(StepKind.LLM, 1), timezone.now())
    assert store.next_sequence(run_id) == 1
