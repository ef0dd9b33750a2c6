"""``store.cancel_many`` called directly: what a set-based cancel writes, by the status it found."""

from __future__ import annotations

import pytest

from nrllm_agents import store
from nrllm_agents.models import AgentRun, RunStatus
from tests.integration.runs import completed, kinds, queued, row, running, stream, waiting

pytestmark = pytest.mark.django_db


def selection(*run_ids):
    return AgentRun.objects.filter(pk__in=run_ids)


def test_cancel_many_cancels_every_active_run_and_counts_by_previous_status(alice):
    q, w, r, done = queued(), waiting(steps=2), running(steps=1), completed()
    result = store.cancel_many(selection(q, w, r, done), by=alice, source="admin", reason="cleanup")
    assert result.cancelled == {"queued": 1, "waiting_for_approval": 1, "running": 1}
    assert result.unchanged == {"completed": 1} and result.cancelled_total == 3 and not result.dry_run
    assert {row(x).status for x in (q, w, r)} == {RunStatus.CANCELLED} and row(done).status == RunStatus.COMPLETED
    assert row(q).cancel_requested_at == row(r).cancel_requested_at == row(w).cancel_requested_at


def test_quiescent_runs_get_their_cancelled_step_and_a_stop_time(alice):
    q, w = queued(), waiting(steps=2)
    store.cancel_many(selection(q, w), by=alice, source="admin", reason="cleanup")
    (ack,) = stream(q)
    assert ack.sequence == 0 and ack.payload["boundary_sequence"] is None
    assert ack.payload["by"] == "alice" and ack.payload["reason"] == "cleanup" and ack.payload["source"] == "admin"
    assert kinds(w) == ["request", "request", "cancelled"] and stream(w)[-1].payload["boundary_sequence"] == 1
    assert row(q).stopped_at == row(q).cancel_requested_at and row(w).suspended_state is None


def test_running_runs_keep_their_lease_for_their_segment_to_acknowledge():
    r = running(steps=1)
    lease = row(r).lease_expires
    store.cancel_many(selection(r), source="api")
    stored = row(r)
    assert stored.stopped_at is None and stored.lease_expires == lease and kinds(r) == ["request"]


def test_a_dry_run_counts_and_writes_nothing():
    q, r, done = queued(), running(), completed()
    result = store.cancel_many(selection(q, r, done), source="api", dry_run=True)
    assert result.dry_run and result.cancelled == {"queued": 1, "running": 1} and result.unchanged == {"completed": 1}
    assert (row(q).status, row(r).status) == (RunStatus.QUEUED, RunStatus.RUNNING) and kinds(q) == []


def test_a_second_bulk_cancel_leaves_everything_unchanged():
    q = queued()
    store.cancel_many(selection(q), source="api")
    again = store.cancel_many(selection(q), source="api")
    assert again.cancelled == {} and again.unchanged == {"cancelled": 1} and kinds(q) == ["cancelled"]


def test_a_distinct_selection_is_cancelled_too():
    """An admin search selects DISTINCT rows, which a row lock cannot take directly."""
    q = queued()
    result = store.cancel_many(selection(q).distinct(), source="admin")
    assert result.cancelled == {"queued": 1}


def test_an_unrecordable_reason_is_refused_before_anything_is_written():
    q = queued()
    with pytest.raises(store.InvalidArgument, match="NUL"):
        store.cancel_many(selection(q), source="api", reason="a\x00b")
    assert row(q).status == RunStatus.QUEUED
