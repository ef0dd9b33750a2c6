"""``segment.SegmentTrace`` driven by hand with ``Step`` values against the real store: what
each boundary writes and raises when the run is held, cancelled while ours, lost, or when the
store cannot be reached; the effect stamp, the recheck before a start, and the acknowledgement."""

from __future__ import annotations

import os
import socket

import pytest
from django.db import OperationalError, connection

from nrllm_agents import store
from nrllm_agents.domain import RunCancellationRequested, RunLeaseLost, SegmentInterrupted, StepKind, ToolCall
from nrllm_agents.models import RunStatus
from nrllm_agents.runtime import segment
from nrllm_agents.runtime.segment import SegmentTrace, hand_back_all, identity
from nrllm_agents.store import Lease
from tests.integration.runs import FUSED_BOUNDARY, OTHER, OWNER, RENEWAL, RUN_READ, failing, kinds, row, running, step

pytestmark = pytest.mark.django_db
CALL = ToolCall("call_1", "write_note", {"title": "t"})


@pytest.fixture(autouse=True)
def no_pauses(monkeypatch):
    """A boundary's retries go on at once (their pauses are for a real database's hiccups)."""
    monkeypatch.setattr(segment, "RETRY_PAUSES", (0, 0, 0, 0))


@pytest.fixture
def shutdown():
    """This process is shutting down (``hand_back_all``); cleared after the test."""
    yield segment.shutdown_requested
    segment.shutdown_requested.clear()


def spy(monkeypatch, name, answers=()):
    """Record the calls of ``store.<name>``; the first calls answer ``answers`` instead."""
    real, calls, queued = getattr(store, name), [], list(answers)

    def call(*args, **kwargs):
        calls.append(kwargs)
        return queued.pop(0) if queued else real(*args, **kwargs)

    monkeypatch.setattr(store, name, call)
    return calls


def trace_of(run_id, **kwargs):
    return SegmentTrace(run_id, owner=OWNER, next_sequence=kwargs.pop("next_sequence", 0), **kwargs)


def lose(run_id):
    """The run is taken from this segment: handed back and claimed by another."""
    assert store.requeue(run_id, OWNER, count_attempt=False).applied
    assert store.claim_queued(run_id, claimed_by=OTHER).applied


# --- held --------------------------------------------------------------------------------
def test_a_held_boundary_records_the_step_and_counts_the_spend():
    seen = []
    trace = trace_of(running(), on_step=seen.append)
    trace(step(StepKind.REQUEST))
    trace(step(StepKind.LLM, 1, usage={"prompt_tokens": 3, "completion_tokens": 4}))
    assert kinds(trace.run_id) == ["request", "llm"] and trace.next_sequence == 2 and trace.recorded == 2
    assert (trace.usage.total_tokens, trace.iterations, trace.round, trace.last_sequence) == (7, 1, 1, 1)
    assert [(s["sequence"], s["kind"]) for s in seen] == [(0, "request"), (1, "llm")]


def test_a_failing_observer_never_stops_the_run(caplog):
    def broken(_):
        raise RuntimeError("observer bug")

    trace = trace_of(running(), on_step=broken)
    trace(step())
    assert kinds(trace.run_id) == ["request"] and "step observer failed" in caplog.text


def test_a_fresh_segment_has_no_last_sequence():
    assert trace_of(running()).last_sequence is None


# --- cancelled while ours ----------------------------------------------------------------
def test_a_cancel_while_ours_records_the_step_in_flight_then_stops():
    trace = trace_of(running(steps=1), next_sequence=1)
    store.cancel(trace.run_id, source="api")
    with pytest.raises(RunCancellationRequested) as stopped:
        trace(step(StepKind.LLM, 1))
    assert stopped.value.boundary_sequence == 1 and kinds(trace.run_id) == ["request", "llm"]


def test_acknowledge_cancel_appends_once_and_tells_the_observer():
    seen = []
    trace = trace_of(running(), on_step=seen.append)
    store.cancel(trace.run_id, source="api")
    with pytest.raises(RunCancellationRequested):
        trace(step())
    event = trace.acknowledge_cancel()
    assert (event.sequence, event.kind, event.payload["boundary_sequence"]) == (1, "cancelled", 0)
    assert seen[-1]["kind"] == "cancelled" and trace.next_sequence == 2 and trace.recorded == 2
    assert trace.acknowledge_cancel() is None and kinds(trace.run_id) == ["request", "cancelled"]
    assert row(trace.run_id).stopped_at is not None


def test_a_tripped_token_skips_the_renewal_and_records_through_the_guarded_append(monkeypatch):
    trace = trace_of(running())
    store.cancel(trace.run_id, source="api")
    trace.token.cancel()  # the watcher read the row cancelled
    records = spy(monkeypatch, "record_step")
    with pytest.raises(RunCancellationRequested):
        trace(step())
    assert records == [] and kinds(trace.run_id) == ["request"]


def test_the_step_a_cancel_cut_short_is_named_in_the_acknowledgement():
    trace = trace_of(running())
    store.cancel(trace.run_id, source="api")
    with pytest.raises(RunCancellationRequested):
        trace(step(StepKind.TOOL, 1, interrupted=True))
    event = trace.acknowledge_cancel()
    assert event.payload["interrupted"] is True and event.payload["interrupted_sequence"] == 0


def test_an_exceeded_budget_cancels_the_run_at_the_boundary():
    trace = trace_of(running(max_total_tokens=5))
    with pytest.raises(RunCancellationRequested):
        trace(step(StepKind.LLM, 1, usage={"prompt_tokens": 4, "completion_tokens": 4}))
    stored = row(trace.run_id)
    assert stored.status == RunStatus.CANCELLED and stored.termination_reason == "budget_exceeded"
    assert kinds(trace.run_id) == ["llm"]


# --- lost --------------------------------------------------------------------------------
def test_a_lost_run_raises_and_writes_nothing():
    trace = trace_of(running(steps=1), next_sequence=1)
    lose(trace.run_id)
    with pytest.raises(RunLeaseLost):
        trace(step())
    assert kinds(trace.run_id) == ["request"] and row(trace.run_id).claimed_by == OTHER


def test_a_sequence_another_segment_wrote_means_the_run_is_lost():
    trace = trace_of(running(steps=1), next_sequence=0)
    with pytest.raises(RunLeaseLost):
        trace(step(StepKind.LLM))
    assert kinds(trace.run_id) == ["request"]


def test_a_run_taken_between_the_failed_boundary_and_its_fallback_is_lost(monkeypatch):
    trace = trace_of(running())
    spy(monkeypatch, "record_step", [Lease.UNKNOWN] * 5)
    real_append = store.append_owned

    def taken_first(*args):
        lose(trace.run_id)
        return real_append(*args)

    monkeypatch.setattr(store, "append_owned", taken_first)
    with pytest.raises(RunLeaseLost):
        trace(step())
    assert kinds(trace.run_id) == []


# --- store unknown -----------------------------------------------------------------------
def test_a_store_failure_is_never_a_cancel_the_step_is_appended_while_ours():
    trace = trace_of(running())
    with failing(FUSED_BOUNDARY, RENEWAL) as failed:
        trace(step())
    assert len(failed) == len(segment.RETRY_PAUSES) + 1  # tried again, then the guarded append
    assert kinds(trace.run_id) == ["request"] and trace.next_sequence == 1


def test_a_boundary_that_recovers_on_a_retry_needs_no_recheck(monkeypatch):
    trace = trace_of(running())
    records = spy(monkeypatch, "record_step", [Lease.UNKNOWN])
    renewals = spy(monkeypatch, "renew")
    trace(step())
    trace.before_start()
    assert len(records) == 2 and renewals == [] and kinds(trace.run_id) == ["request"]


def test_after_an_unknown_boundary_the_next_start_reads_the_row_once():
    trace = trace_of(running())
    with failing(FUSED_BOUNDARY, RENEWAL):
        trace(step())
    expires = row(trace.run_id).lease_expires
    trace.before_start()  # renews: the run is still ours
    assert row(trace.run_id).lease_expires > expires
    with failing(RENEWAL) as failed:
        trace.before_start()  # nothing more to check
    assert failed == []


def test_a_cancel_during_an_unknown_boundary_stops_before_the_next_start():
    trace = trace_of(running())
    with failing(FUSED_BOUNDARY, RENEWAL):
        trace(step())
    store.cancel(trace.run_id, source="api")
    with pytest.raises(RunCancellationRequested) as stopped:
        trace.before_start()
    assert stopped.value.boundary_sequence == 0


def test_a_run_lost_during_an_unknown_boundary_stops_before_the_next_start():
    trace = trace_of(running())
    with failing(FUSED_BOUNDARY, RENEWAL):
        trace(step())
    lose(trace.run_id)
    with pytest.raises(RunLeaseLost):
        trace.before_start()


def test_a_store_still_unreachable_at_the_start_lets_it_go_on_and_checks_again():
    trace = trace_of(running())
    with failing(FUSED_BOUNDARY, RENEWAL):
        trace(step())
        trace.before_start()  # unknown again: go on, never a fabricated cancel
    store.cancel(trace.run_id, source="api")
    with pytest.raises(RunCancellationRequested):
        trace.before_start()  # the check was kept for the next start


def test_a_refused_fallback_append_with_an_unreadable_row_is_lost(monkeypatch):
    trace = trace_of(running())
    spy(monkeypatch, "record_step", [Lease.UNKNOWN] * 5)
    lose(trace.run_id)
    with failing(RUN_READ), pytest.raises(RunLeaseLost):
        trace(step())
    assert kinds(trace.run_id) == []


def test_a_boundary_whose_fallback_append_keeps_failing_raises_the_error():
    trace = trace_of(running())
    with failing(FUSED_BOUNDARY, RENEWAL, "INSERT INTO nrllm_agents_agentrunevent"), pytest.raises(OperationalError):
        trace(step())
    assert trace.next_sequence == 0


@pytest.mark.postgres_only
@pytest.mark.django_db(transaction=True)  # a broken connection is replaced only outside a transaction
def test_a_broken_connection_is_replaced_and_the_boundary_recorded():
    trace = trace_of(running())
    connection.connection.close()  # the server went away under the open connection
    trace(step())
    assert kinds(trace.run_id) == ["request"] and connection.is_usable()


# --- shutdown ----------------------------------------------------------------------------
def test_a_step_cut_short_by_a_shutdown_is_not_recorded():
    trace = trace_of(running(), interruptible=True)
    trace.token.hand_back()
    with pytest.raises(SegmentInterrupted):
        trace(step(StepKind.LLM, 1, interrupted=True))
    assert kinds(trace.run_id) == []


def test_a_shutdown_trips_the_queued_segments_only(shutdown):
    queued_trace, interactive = trace_of(running(), interruptible=True), trace_of(running())
    assert hand_back_all() >= 1 and shutdown.is_set()
    assert queued_trace.token.handing_back and not interactive.token.cancelled
    interactive(step())  # an interactive segment finishes its run
    assert kinds(interactive.run_id) == ["request"]


def test_a_write_in_flight_during_a_shutdown_finishes_and_hands_back_at_its_boundary(shutdown):
    trace = trace_of(running(), interruptible=True)
    trace.before_effect(CALL)  # shields the token: a write is never cut short
    hand_back_all()
    assert not trace.token.handing_back
    with pytest.raises(SegmentInterrupted):
        trace(step(StepKind.TOOL, 1, name="write_note"))
    assert kinds(trace.run_id) == ["tool"] and row(trace.run_id).pending_effect is None


def test_a_queued_segment_started_during_a_shutdown_is_handed_back_at_once(shutdown):
    shutdown.set()
    assert trace_of(running(), interruptible=True).token.handing_back


# --- the effect stamp --------------------------------------------------------------------
def test_the_effect_is_stamped_before_the_write_and_cleared_once_its_step_is_recorded():
    trace = trace_of(running())
    trace.before_effect(CALL)
    assert row(trace.run_id).pending_effect["call"] == CALL.as_dict()
    trace(step(StepKind.TOOL, 1, name="write_note"))
    assert row(trace.run_id).pending_effect is None


def test_a_clear_the_store_missed_is_made_after_the_next_tool(monkeypatch):
    trace = trace_of(running())
    trace.before_effect(CALL)
    renewals = spy(monkeypatch, "renew", [Lease.UNKNOWN])
    trace(step(StepKind.TOOL, 1))
    assert row(trace.run_id).pending_effect is not None
    trace(step(StepKind.TOOL, 1))
    assert [r.get("clear_effect") for r in renewals] == [True, True] and row(trace.run_id).pending_effect is None


def test_a_run_cancelled_before_its_write_stops_without_stamping():
    trace = trace_of(running(steps=2), next_sequence=2)
    store.cancel(trace.run_id, source="api")
    with pytest.raises(RunCancellationRequested) as stopped:
        trace.before_effect(CALL)
    assert stopped.value.boundary_sequence == 1 and row(trace.run_id).pending_effect is None


def test_a_run_lost_before_its_write_stops_without_stamping():
    trace = trace_of(running())
    lose(trace.run_id)
    with pytest.raises(RunLeaseLost):
        trace.before_effect(CALL)
    assert row(trace.run_id).pending_effect is None


def test_a_shutdown_just_before_the_write_hands_back_without_stamping():
    trace = trace_of(running(), interruptible=True)
    trace.token.hand_back()
    with pytest.raises(SegmentInterrupted):
        trace.before_effect(CALL)
    assert row(trace.run_id).pending_effect is None


# --- deltas and identity -----------------------------------------------------------------
def test_deltas_carry_their_offset_within_a_round_and_a_failing_observer_is_ignored(caplog):
    seen = []
    trace = trace_of(running(), on_delta=seen.append)
    for round_, text in [(1, "ab"), (1, "cde"), (2, "f")]:
        trace.delta(round_, text)
    assert [(d["round"], d["offset"], d["text"]) for d in seen] == [(1, 0, "ab"), (1, 2, "cde"), (2, 0, "f")]

    def broken(_):
        raise RuntimeError("observer bug")

    trace.on_delta = broken
    trace.delta(2, "g")
    assert "delta observer failed" in caplog.text
    trace.on_delta = None
    trace.delta(2, "h")  # published to the run's watchers only
    assert len(seen) == 3


def test_identity_names_the_role_host_and_process_and_tells_threads_apart():
    first, second = identity("worker"), identity("worker")
    assert first.startswith(f"worker:{socket.gethostname()}:{os.getpid()}:") and first != second
