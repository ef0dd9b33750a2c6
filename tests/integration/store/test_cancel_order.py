"""The cancel's audit reads in commit order (issue 9, finding 5d), and the one-statement cancel
keeps its fence when the row changes under it.

Guards: ``cancel_requested_at`` is stamped once the row lock is held. Stamped before (as it
was), a step committed while the cancel waited for the lock carried a later time than the
cancel it preceded: under a storm of concurrent cancels the skew reached 80 ms.

Needs ``transaction=True``: the runs, the cancels and the lock holder use their own
connections in threads and must see each other's commits.
"""

from __future__ import annotations

import random
import threading
import time
import uuid
from typing import Any

import pytest
from django.db import connection, connections, transaction
from django.utils import timezone

from nrllm_agents import store
from nrllm_agents.domain import Step, StepKind
from nrllm_agents.models import AgentRun, AgentRunEvent, CancelSource, RunStatus
from nrllm_agents.runtime.agent_runtime import CancelOutcome
from nrllm_agents.validation.run_request import RunRequest
from tests.conftest import race_rounds

pytestmark = pytest.mark.django_db(transaction=True)

RUNS = 48
SEGMENT_THREADS = 6
CANCELS_PER_RUN = 3


def _script(rounds: int) -> list[dict[str, Any]]:
    return [
        {"tool_calls": [{"name": "calculator", "arguments": {"expression": f"{i} + 1"}}]} for i in range(rounds)
    ] + [{"content": "done"}]


def test_no_step_committed_before_a_cancel_looks_later_than_it(runtime):
    """Many runs execute while storms of concurrent cancels hit them at random moments.

    For every cancelled run, the steps before its stop boundary were renewed, i.e. committed
    while the run was still running, before the cancel: each must carry a time no later than
    ``cancel_requested_at``.
    """
    rng = random.Random(5)
    started: list[uuid.UUID] = []
    started_lock = threading.Lock()
    done = threading.Event()
    errors: list[BaseException] = []

    def on_step(step: dict[str, Any]) -> None:
        if step["sequence"] == 0:
            with started_lock:
                started.append(uuid.UUID(str(step["run_id"])))

    def segments(count: int) -> None:
        try:
            for _ in range(count):
                runtime.run(
                    RunRequest.from_mapping(
                        {"prompt": "storm", "tools": ["calculator"], "script": _script(30), "max_iterations": 40}
                    ),
                    on_step=on_step,
                )
        except BaseException as exc:
            errors.append(exc)
        finally:
            connections.close_all()

    def cancel_storm(run_id: uuid.UUID, delay: float) -> None:
        barrier = threading.Barrier(CANCELS_PER_RUN)

        def one() -> None:
            try:
                barrier.wait(10)
                runtime.cancel(run_id, source=CancelSource.SYSTEM, reason="storm")
            except BaseException as exc:
                errors.append(exc)
            finally:
                connections.close_all()

        time.sleep(delay)  # a random moment of the run's life: the point of the test, not a wait
        cancellers = [threading.Thread(target=one) for _ in range(CANCELS_PER_RUN)]
        for t in cancellers:
            t.start()
        for t in cancellers:
            t.join(30)

    def dispatcher() -> None:
        seen = 0
        storms: list[threading.Thread] = []
        while not done.is_set() or seen < len(started):
            with started_lock:
                fresh = started[seen:]
                seen = len(started)
            for run_id in fresh:
                storm = threading.Thread(target=cancel_storm, args=(run_id, rng.uniform(0, 0.08)))
                storm.start()
                storms.append(storm)
            done.wait(0.002)
        for storm in storms:
            storm.join(30)

    workers = [threading.Thread(target=segments, args=(RUNS // SEGMENT_THREADS,)) for _ in range(SEGMENT_THREADS)]
    watcher = threading.Thread(target=dispatcher)
    watcher.start()
    for w in workers:
        w.start()
    for w in workers:
        w.join(300)
    done.set()
    watcher.join(300)
    assert not errors, errors[:3]
    assert len(started) == RUNS

    cancelled = list(AgentRun.objects.filter(pk__in=started, status=RunStatus.CANCELLED))
    assert len(cancelled) >= RUNS // 2, "the storm should have cancelled most runs mid-way"
    checked = 0
    for run in cancelled:
        events = list(AgentRunEvent.objects.filter(run_id=run.pk).order_by("sequence"))
        ack = events[-1]
        assert ack.kind == StepKind.CANCELLED and run.stopped_at >= run.cancel_requested_at
        boundary = ack.payload["boundary_sequence"]
        before = [e for e in events if boundary is not None and e.sequence < boundary]
        late = [
            (e.sequence, (e.created_at - run.cancel_requested_at).total_seconds() * 1000)
            for e in before
            if e.created_at > run.cancel_requested_at
        ]
        assert not late, f"run {run.pk}: steps committed before the cancel stamped after it (seq, ms): {late}"
        checked += len(before)
    assert checked > 0


def _record_and_requeue(run_id: uuid.UUID) -> None:
    for seq in range(3):
        store.append_event(run_id, seq, Step(kind=StepKind.TOOL, round=1, payload={}), timezone.now())
    AgentRun.objects.filter(pk=run_id).update(status=RunStatus.QUEUED, claimed_by="", request_payload=store.RECOVER)


def _behind_a_lock(action: Any, holder_work: Any = _record_and_requeue) -> Any:
    """Run ``action(run_id)`` while a segment holds the row and does ``holder_work(run_id)``
    (by default: records 3 steps and requeues it) in the same transaction.

    ``action`` starts once the segment holds the row lock and the segment goes on once
    ``action`` waits for it, so its statement's snapshot predates the segment's commit.
    Returns ``(run_id, action's result)``.
    """
    run = store.begin(
        RunRequest.from_mapping({"prompt": "p", "tools": []}).row_fields(),
        claimed_by="seg",
        lease_expires=store.lease_until(),
    )
    holder_locked, release = threading.Event(), threading.Event()
    box: dict[str, Any] = {}

    def segment() -> None:
        try:
            with transaction.atomic():
                AgentRun.objects.select_for_update().filter(pk=run.pk).values("status").get()
                holder_locked.set()
                release.wait(10)
                holder_work(run.pk)
        finally:
            connections.close_all()

    def act() -> None:
        try:
            box["pid"] = connection.cursor().connection.info.backend_pid
            box["result"] = action(run.pk)
        except BaseException as exc:
            box["result"] = exc
        finally:
            connections.close_all()

    holder = threading.Thread(target=segment)
    holder.start()
    assert holder_locked.wait(10)
    actor = threading.Thread(target=act)
    actor.start()
    _wait_until_blocked(box)
    release.set()
    holder.join(30)
    actor.join(30)
    assert not isinstance(box["result"], BaseException), box["result"]
    return run.pk, box["result"]


ONLY_POSTGRES = pytest.mark.postgres_only  # the one-statement fences and pg_stat_activity are PostgreSQL's


@ONLY_POSTGRES
def test_one_statement_cancel_falls_back_when_the_row_changes_under_its_lock(runtime):
    """The cancel's snapshot predates the segment's commit, so it must not compute the
    ``cancelled`` step's sequence from it: it re-runs the fence and appends after every step."""
    for _ in range(race_rounds(20)):
        run_id, result = _behind_a_lock(lambda pk: runtime.cancel(pk, source=CancelSource.CLI))
        assert result.outcome == CancelOutcome.CANCELLED and result.previous_status == RunStatus.QUEUED
        kinds = list(AgentRunEvent.objects.filter(run_id=run_id).order_by("sequence").values_list("sequence", "kind"))
        assert kinds == [(0, "tool"), (1, "tool"), (2, "tool"), (3, "cancelled")]
        row = AgentRun.objects.get(pk=run_id)
        assert row.stopped_at == row.cancel_requested_at and row.lease_expires is None


@ONLY_POSTGRES
def test_one_statement_claim_falls_back_when_the_row_changes_under_its_lock():
    """Same for the claim: the sequence the next segment starts at counts every step."""
    for _ in range(race_rounds(20)):
        run_id, claim = _behind_a_lock(
            lambda pk: store.claim_queued(pk, claimed_by="next", lease_expires=store.lease_until())
        )
        assert claim.applied and claim.data["request_payload"] == store.RECOVER
        assert claim.data.get("next_sequence", store.next_sequence(run_id)) == 3


@ONLY_POSTGRES
def test_bulk_cancel_stamps_after_its_locks(runtime):
    """A step committed while a bulk cancel waited for the run's row carries an earlier time."""

    def record_step(run_id: uuid.UUID) -> None:
        store.append_event(run_id, 0, Step(kind=StepKind.TOOL, round=1, payload={}), timezone.now())

    for _ in range(race_rounds(20)):
        run_id, report = _behind_a_lock(
            lambda pk: runtime.cancel_many(AgentRun.objects.filter(pk=pk), source="cli"), record_step
        )
        assert report.cancelled == {"running": 1}
        step = AgentRunEvent.objects.get(run_id=run_id, sequence=0)
        assert step.created_at < AgentRun.objects.get(pk=run_id).cancel_requested_at


def _wait_until_blocked(box: dict[str, Any]) -> None:
    """Until the cancel's backend waits on a row lock (read from pg_stat_activity)."""
    deadline = time.monotonic() + 10
    with connections["default"].cursor() as cur:
        while time.monotonic() < deadline:
            pid = box.get("pid")
            if pid is not None:
                cur.execute("SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", [pid])
                row = cur.fetchone()
                if row and row[0] == "Lock":
                    return
            time.sleep(0.001)
    raise AssertionError("the cancel never waited for the row lock")
