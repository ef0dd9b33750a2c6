"""The one-statement cancel and claim (PostgreSQL) hand a row that changed while they waited
for its lock to the read-check-write fence, so the ``cancelled`` step and the claim's
sequence are read after that change, never from the statement's older snapshot.

Needs ``transaction=True``: a second thread holds the row lock in its own committed
transaction while this one's statement waits for it.
"""

from __future__ import annotations

import threading

import pytest
from django.db import connection, transaction
from django.utils import timezone

from nrllm_agents import store
from nrllm_agents.models import AgentRun, RunStatus
from tests.integration.runs import OWNER, kinds, row, running, step

pytestmark = [pytest.mark.postgres_only, pytest.mark.django_db(transaction=True)]


def requeue_while_waited_on(run_id, fence):
    """Lock the running run, record one more step and requeue it, commit once ``fence`` (run on
    this thread) is blocked on the lock; returns what ``fence`` returned."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        waiter = cursor.fetchone()[0]
    locked, failures = threading.Event(), []

    def segment():
        try:
            with transaction.atomic():
                AgentRun.objects.select_for_update().get(pk=run_id)
                locked.set()
                assert store.record_step(run_id, OWNER, 1, step(), timezone.now()) is store.Lease.HELD
                assert store.requeue(run_id, OWNER, count_attempt=False).applied
                with connection.cursor() as cursor:
                    for _ in range(10_000):  # until the fence waits for this lock (no event tells)
                        cursor.execute(
                            "SELECT %s = ANY(pg_blocking_pids(%s))", [connection.connection.info.backend_pid, waiter]
                        )
                        if cursor.fetchone()[0]:
                            break
                        threading.Event().wait(0.001)
                    else:
                        failures.append("the fence never waited for the lock")
        except Exception as exc:  # reported on the test's thread
            failures.append(repr(exc))
            locked.set()
        finally:
            connection.close()

    thread = threading.Thread(target=segment)
    thread.start()
    assert locked.wait(10)
    result = fence()
    thread.join(10)
    assert not failures, failures
    return result


def test_a_cancel_that_waited_for_a_requeue_appends_after_the_step_it_committed():
    run_id = running(steps=1)
    fence = requeue_while_waited_on(run_id, lambda: store.cancel(run_id, source="api"))
    assert (fence.applied, fence.previous) == (True, RunStatus.QUEUED)
    assert kinds(run_id) == ["request", "request", "cancelled"]
    assert row(run_id).stopped_at is not None


def test_a_claim_that_waited_for_a_requeue_wins_through_the_fence():
    run_id = running(steps=1)
    claim = requeue_while_waited_on(run_id, lambda: store.claim_queued(run_id, claimed_by="worker:x"))
    assert claim.applied and claim.data["request_payload"] == store.RECOVER
    assert store.next_sequence(run_id) == 2 and row(run_id).claimed_by == "worker:x"
