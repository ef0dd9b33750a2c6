"""The lease writes of ``store.leases`` called directly: the boundary (renew, record, why not
held, the guarded append), the hand-back and the reaper. ``record_step`` runs through its one
prepared statement and through the portable transaction (``store_path``)."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from django.db import IntegrityError
from django.test import override_settings
from django.utils import timezone

from nrllm_agents import store
from nrllm_agents.domain import StepKind, Usage
from nrllm_agents.models import AgentRun, RunStatus, TerminationReason
from nrllm_agents.store import Lease
from tests.integration.runs import (
    FUSED_BOUNDARY,
    OTHER,
    OWNER,
    RENEWAL,
    RUN_READ,
    completed,
    failing,
    kinds,
    queued,
    row,
    running,
    step,
    stream,
)

pytestmark = pytest.mark.django_db
NOW = timezone.now


def expire(run_id, *, ago: float = 60) -> None:
    """The segment stopped renewing: its lease ran out ``ago`` seconds ago."""
    AgentRun.objects.filter(pk=run_id).update(lease_expires=timezone.now() - timedelta(seconds=ago))


def test_lease_until_is_lease_seconds_from_now(settings):
    settings.NRLLM_AGENTS = {"LEASE_SECONDS": 90}
    now = timezone.now()
    assert store.lease_until(now) == now + timedelta(seconds=90)


# --- renew -------------------------------------------------------------------------------
def test_renew_extends_the_owners_lease():
    run_id = running()
    expire(run_id, ago=1)
    assert store.renew(run_id, OWNER) is Lease.HELD
    assert row(run_id).lease_expires > timezone.now()


def test_renew_by_another_segment_or_after_a_cancel_is_not_held():
    run_id = running()
    assert store.renew(run_id, OTHER) is Lease.NOT_HELD
    store.cancel(run_id, source="api")
    assert store.renew(run_id, OWNER) is Lease.NOT_HELD


def test_renew_stamps_and_clears_the_effect_in_flight():
    run_id = running()
    assert store.renew(run_id, OWNER, effect={"call": {"name": "write_note"}}) is Lease.HELD
    assert row(run_id).pending_effect == {"call": {"name": "write_note"}}
    assert store.renew(run_id, OWNER, clear_effect=True) is Lease.HELD
    assert row(run_id).pending_effect is None


def test_a_renewal_the_store_cannot_make_is_unknown(caplog):
    run_id = running()
    with failing(RENEWAL):
        assert store.renew(run_id, OWNER) is Lease.UNKNOWN
    assert "lease renewal" in caplog.text
    assert store.renew(run_id, OWNER) is Lease.HELD  # the failure did not doom the test's transaction


# --- record_step -------------------------------------------------------------------------
def test_record_step_renews_and_appends_in_one_write(store_path):
    run_id = running()
    expire(run_id, ago=1)
    lease = store.record_step(run_id, OWNER, 0, step(StepKind.LLM, 2, usage={"prompt_tokens": 1}), NOW())
    assert lease is Lease.HELD
    (event,) = stream(run_id)
    assert (event.sequence, event.kind, event.round, event.payload) == (0, "llm", 2, {"usage": {"prompt_tokens": 1}})
    assert row(run_id).lease_expires > timezone.now()


def test_record_step_writes_nothing_once_the_run_is_not_ours(store_path):
    mine, cancelled = running(), running()
    store.cancel(cancelled, source="api")
    assert store.record_step(mine, OTHER, 0, step(), NOW()) is Lease.NOT_HELD
    assert store.record_step(cancelled, OWNER, 0, step(), NOW()) is Lease.NOT_HELD
    assert kinds(mine) == kinds(cancelled) == []


def test_record_step_raises_on_a_sequence_another_segment_wrote(store_path):
    run_id = running(steps=1)
    with pytest.raises(IntegrityError):
        store.record_step(run_id, OWNER, 0, step(), NOW())
    assert store.record_step(run_id, OWNER, 1, step(), NOW()) is Lease.HELD  # the failure was contained


def test_a_boundary_the_store_cannot_record_is_unknown(store_path):
    run_id = running()
    with failing(FUSED_BOUNDARY, RENEWAL) as failed:
        assert store.record_step(run_id, OWNER, 0, step(), NOW()) is Lease.UNKNOWN
    assert failed and kinds(run_id) == []


# --- why_not_held ------------------------------------------------------------------------
def test_why_not_held_tells_a_cancel_while_ours():
    run_id = running()
    store.cancel(run_id, source="api")
    assert store.why_not_held(run_id, OWNER) is Lease.CANCELLED


@pytest.mark.parametrize("how", ["another owner", "finished", "requeued", "missing"])
def test_why_not_held_tells_a_lost_run(how):
    run_id = running()
    if how == "another owner":
        store.requeue(run_id, OWNER, count_attempt=False)
        store.claim_queued(run_id, claimed_by=OTHER)
    elif how == "finished":
        store.settle(run_id, status=RunStatus.COMPLETED, reason="completed", owner=OWNER)
    elif how == "requeued":
        store.requeue(run_id, OWNER, count_attempt=False)
    else:
        run_id = uuid.uuid4()
    assert store.why_not_held(run_id, OWNER) is Lease.LOST


def test_a_cancel_the_other_segment_owns_is_lost_to_this_one():
    run_id = running()
    store.cancel(run_id, source="api")
    assert store.why_not_held(run_id, OTHER) is Lease.LOST


def test_why_not_held_is_unknown_when_the_row_cannot_be_read(caplog):
    run_id = running()
    store.cancel(run_id, source="api")
    with failing(RUN_READ):
        assert store.why_not_held(run_id, OWNER) is Lease.UNKNOWN
    assert "ownership read" in caplog.text


# --- append_owned ------------------------------------------------------------------------
def test_append_owned_records_while_running_without_renewing():
    run_id = running()
    expire(run_id, ago=5)
    before = row(run_id).lease_expires
    assert store.append_owned(run_id, OWNER, 0, step(StepKind.TOOL, 1, result="4"), NOW()) is Lease.HELD
    assert stream(run_id)[0].payload == {"result": "4"} and row(run_id).lease_expires == before


def test_append_owned_records_the_step_in_flight_of_a_cancelled_run_until_acknowledged():
    run_id = running()
    store.cancel(run_id, source="api")
    assert store.append_owned(run_id, OWNER, 0, step(), NOW()) is Lease.HELD
    store.acknowledge_cancel(run_id, sequence=1, round=0, iterations=0, usage=Usage(), owner=OWNER)
    assert store.append_owned(run_id, OWNER, 2, step(), NOW()) is Lease.NOT_HELD
    assert kinds(run_id) == ["request", "cancelled"]


def test_append_owned_by_another_segment_writes_nothing():
    run_id = running()
    assert store.append_owned(run_id, OTHER, 0, step(), NOW()) is Lease.NOT_HELD
    assert kinds(run_id) == []


def test_append_owned_raises_on_a_taken_sequence():
    run_id = running(steps=1)
    with pytest.raises(IntegrityError):
        store.append_owned(run_id, OWNER, 0, step(), NOW())


# --- requeue -----------------------------------------------------------------------------
def test_requeue_hands_the_run_back_counting_the_attempt():
    run_id = running()
    store.renew(run_id, OWNER, effect={"call": {}})
    fence = store.requeue(run_id, OWNER, count_attempt=True, error_class="ProviderError", error_message="e" * 3000)
    assert (fence.applied, fence.status, fence.previous) == (True, RunStatus.QUEUED, RunStatus.RUNNING)
    stored = row(run_id)
    assert stored.request_payload == store.RECOVER and stored.attempts == 1
    assert stored.claimed_by == "" and stored.lease_expires is None and stored.pending_effect is None
    assert stored.error_class == "ProviderError" and len(stored.error_message) == 2000


def test_a_shutdown_hand_back_does_not_count_an_attempt():
    run_id = running()
    assert store.requeue(run_id, OWNER, count_attempt=False).applied
    assert row(run_id).attempts == 0


def test_requeue_by_a_segment_that_lost_the_run_is_refused():
    run_id = running()
    store.cancel(run_id, source="api")
    assert store.requeue(run_id, OWNER, count_attempt=True) == store.Transition(
        False, RunStatus.CANCELLED, RunStatus.CANCELLED
    )
    assert not store.requeue(running(), OTHER, count_attempt=True).applied
    assert store.requeue(uuid.uuid4(), OWNER, count_attempt=False) == store.NOT_FOUND


# --- reap --------------------------------------------------------------------------------
def test_reap_requeues_a_run_whose_lease_expired():
    lost, alive = running(), running()
    expire(lost)
    report = store.reap()
    assert report.requeued == [lost] and report.skipped == 0
    stored = row(lost)
    assert stored.status == RunStatus.QUEUED and stored.attempts == 1 and stored.request_payload == store.RECOVER
    assert row(alive).status == RunStatus.RUNNING


@override_settings(NRLLM_AGENTS={"IN_DOUBT": "fail"})  # the default waits: test_in_doubt.py
def test_reap_dead_letters_a_run_lost_during_a_non_idempotent_call():
    run_id = running()
    store.renew(run_id, OWNER, effect={"call": {"name": "write_note"}})
    expire(run_id)
    report = store.reap()
    assert report.dead_lettered == {TerminationReason.NOT_RETRYABLE: 1}
    stored = row(run_id)
    assert (stored.status, stored.termination_reason, stored.error_class) == ("failed", "not_retryable", "LeaseExpired")
    assert "non-idempotent" in stored.error_message


def test_reap_dead_letters_a_run_that_used_its_requeue_budget(settings):
    settings.NRLLM_AGENTS = {"MAX_ATTEMPTS": 1}
    run_id = running()
    store.requeue(run_id, OWNER, count_attempt=True)
    store.claim_queued(run_id, claimed_by=OWNER)
    expire(run_id)
    report = store.reap()
    assert report.dead_lettered == {TerminationReason.RETRIES_EXHAUSTED: 1}
    assert row(run_id).error_message == "the worker was lost and the budget of 1 requeues is used"


@override_settings(NRLLM_AGENTS={"IN_DOUBT": "fail"})  # the default waits: test_in_doubt.py
def test_a_dry_reap_counts_and_writes_nothing():
    requeue, effect = running(), running()
    store.renew(effect, OWNER, effect={"call": {}})
    orphan = running()
    store.cancel(orphan, source="api")
    for run_id in (requeue, effect, orphan):
        expire(run_id)
    report = store.reap(dry_run=True)
    assert report.requeued == [requeue]
    assert report.dead_lettered == {"not_retryable": 1} and report.acknowledged == 1
    assert report.summary().startswith("would have: 1 requeued, 1 dead-lettered (not_retryable), 1 cancel acknowledged")
    assert [row(r).status for r in (requeue, effect)] == [RunStatus.RUNNING, RunStatus.RUNNING]
    assert row(orphan).stopped_at is None


def test_reap_skips_a_run_that_renewed_between_the_scan_and_the_write():
    from django.db import connection

    run_id = running()
    expire(run_id)
    renewed = []

    def heartbeat_first(execute, sql, params, many, context):
        if not renewed and sql.replace('"', "").startswith("UPDATE nrllm_agents_agentrun SET status"):
            renewed.append(store.renew(run_id, OWNER))  # the segment's boundary lands first
        return execute(sql, params, many, context)

    with connection.execute_wrapper(heartbeat_first):
        report = store.reap()
    assert renewed == [Lease.HELD] and report.skipped == 1 and report.requeued == []
    assert row(run_id).status == RunStatus.RUNNING
    assert "1 skipped (alive)" in report.summary()


def test_reap_acknowledges_a_cancel_whose_segment_died():
    run_id = running(steps=2)
    store.cancel(run_id, source="api", reason="gone")
    expire(run_id)
    report = store.reap()
    assert report.acknowledged == 1 and report.requeued == []
    ack = stream(run_id)[-1]
    assert (ack.sequence, ack.kind, ack.payload["boundary_sequence"]) == (2, "cancelled", 1)
    stored = row(run_id)
    assert stored.stopped_at is not None and stored.claimed_by == "" and stored.lease_expires is None


def test_reap_leaves_alone_what_is_not_a_stale_running_run():
    runs = [queued(), completed(), running()]
    assert store.reap().summary() == "0 requeued, 0 cancel acknowledged, 0 skipped (alive)"
    assert [row(r).status for r in runs] == [RunStatus.QUEUED, RunStatus.COMPLETED, RunStatus.RUNNING]


@pytest.mark.postgres_only
def test_without_prepared_statements_the_boundary_is_still_one_server_bound_statement(settings):
    """Behind a PgBouncer that cannot keep prepared statements (``PREPARED_STATEMENTS`` off)."""
    settings.NRLLM_AGENTS = {"PREPARED_STATEMENTS": False}
    run_id = running()
    assert store.record_step(run_id, OWNER, 0, step(), NOW()) is Lease.HELD
    assert store.record_step(run_id, OTHER, 1, step(), NOW()) is Lease.NOT_HELD
    assert kinds(run_id) == ["request"]
