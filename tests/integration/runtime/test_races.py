"""Races between real threads, each on its own database connection, many rounds each.

Every test here needs ``transaction=True``: the racing threads use their own connections and
must see each other's committed rows. On PostgreSQL the fences rely on row locks
(``select_for_update``) and guarded UPDATEs; on SQLite on IMMEDIATE transactions.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection

from nrllm_agents import store
from nrllm_agents.models import TERMINAL, AgentRun, AgentRunEvent, CancelSource, RunStatus
from nrllm_agents.runtime.agent_runtime import ApprovalNotPending, CancelOutcome, Outcome
from nrllm_agents.validation.run_request import RunRequest
from tests.conftest import race_rounds

ROUNDS = race_rounds(200)
pytestmark = pytest.mark.django_db(transaction=True)


def race(*fns: Callable[[], Any]) -> list[Any]:
    """Run the functions at the same moment in threads; return each result (or exception)."""
    barrier = threading.Barrier(len(fns))
    results: list[Any] = [None] * len(fns)

    def runner(i: int, fn: Callable[[], Any]) -> None:
        try:
            barrier.wait(10)
            results[i] = fn()
        except BaseException as exc:  # collected and asserted on by the test
            results[i] = exc
        finally:
            connection.close()

    threads = [threading.Thread(target=runner, args=(i, fn)) for i, fn in enumerate(fns)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return results


def new_running_run() -> AgentRun:
    return store.begin(RunRequest.from_mapping({"prompt": "race", "script": [{"content": "x"}]}).row_fields())


def test_cancel_versus_settle_exactly_one_wins(runtime):
    wins = {"settle": 0, "cancel": 0}
    for _ in range(ROUNDS):
        run = new_running_run()
        settled, cancelled = race(
            lambda: store.settle(run.pk, status=RunStatus.COMPLETED, reason="completed"),
            lambda: runtime.cancel(run.pk, source=CancelSource.SYSTEM),
        )
        assert settled.applied != (cancelled.outcome == CancelOutcome.CANCELLED)
        final = AgentRun.objects.get(pk=run.pk)
        if settled.applied:
            wins["settle"] += 1
            assert final.status == RunStatus.COMPLETED and cancelled.outcome == CancelOutcome.ALREADY_FINISHED
            assert final.cancel_requested_at is None
        else:
            wins["cancel"] += 1
            assert final.status == RunStatus.CANCELLED and settled.status == RunStatus.CANCELLED
            assert final.termination_reason == "cancelled"
    assert sum(wins.values()) == ROUNDS


def test_segment_outcome_tells_the_truth_when_racing_a_cancel(runtime):
    """A whole run races a cancel issued as soon as its first step shows up."""
    request = RunRequest.from_mapping({"prompt": "race", "tools": [], "script": [{"content": "answer"}]})
    for _ in range(ROUNDS):
        started = threading.Event()
        box: dict[str, Any] = {}

        def on_step(step: dict) -> None:
            box["id"] = step["run_id"]
            started.set()

        def segment():
            return runtime.run(request, on_step=on_step)

        def canceller():
            started.wait(10)
            return runtime.cancel(box["id"], source=CancelSource.SYSTEM)

        result, cancel = race(segment, canceller)
        assert not isinstance(result, BaseException), result
        final = AgentRun.objects.get(pk=result.run_id)
        assert final.status in TERMINAL
        assert result.status == final.status
        kinds = list(
            AgentRunEvent.objects.filter(run_id=result.run_id).order_by("sequence").values_list("kind", flat=True)
        )
        if cancel.outcome == CancelOutcome.CANCELLED:
            assert result.outcome == Outcome.CANCELLED and final.status == RunStatus.CANCELLED
            assert kinds[-1] == "cancelled" and kinds.count("cancelled") == 1
            assert final.stopped_at is not None
        else:
            assert cancel.outcome == CancelOutcome.ALREADY_FINISHED
            assert result.outcome == Outcome.COMPLETED and final.status == RunStatus.COMPLETED
            assert "cancelled" not in kinds


@pytest.mark.parametrize("initial", [RunStatus.RUNNING, RunStatus.QUEUED])
def test_two_cancels_exactly_one_reports_cancelled(runtime, initial):
    for _ in range(race_rounds(ROUNDS // 2)):
        run = new_running_run()
        if initial == RunStatus.QUEUED:
            AgentRun.objects.filter(pk=run.pk).update(status=RunStatus.QUEUED)  # test setup only
        first, second = race(
            lambda: runtime.cancel(run.pk, source=CancelSource.CLI),
            lambda: runtime.cancel(run.pk, source=CancelSource.API),
        )
        outcomes = sorted([first.outcome, second.outcome])
        assert outcomes == sorted([CancelOutcome.CANCELLED, CancelOutcome.ALREADY_CANCELLED])
        # A quiescent run gets exactly one acknowledgement, from the winner.
        expected = 1 if initial == RunStatus.QUEUED else 0
        assert AgentRunEvent.objects.filter(run_id=run.pk, kind="cancelled").count() == expected


def test_two_approves_exactly_one_resumes(runtime):
    request = {
        "prompt": "gate",
        "tools": ["write_note"],
        "script": [
            {"tool_calls": [{"name": "write_note", "arguments": {"title": "t", "body": "b"}}]},
            {"content": "ok"},
        ],
    }
    from nrllm_agents.models import Note

    for _ in range(race_rounds(ROUNDS // 4)):
        waiting = runtime.run(request)
        a, b = race(lambda: runtime.approve(waiting.run_id, True), lambda: runtime.approve(waiting.run_id, True))
        winners = [r for r in (a, b) if not isinstance(r, BaseException)]
        losers = [r for r in (a, b) if isinstance(r, BaseException)]
        assert len(winners) == 1 and winners[0].outcome == Outcome.COMPLETED
        assert len(losers) == 1 and isinstance(losers[0], ApprovalNotPending)
        assert Note.objects.filter(run_id=waiting.run_id).count() == 1


def new_queued_run() -> AgentRun:
    request = RunRequest.from_mapping({"prompt": "race", "script": [{"content": "x"}]})
    return store.create_queued(request.row_fields(), request.as_dict())


def test_two_claims_exactly_one_wins():
    """Two deliveries of one job claim at once: one runs it, the other does nothing."""
    for _ in range(ROUNDS):
        run = new_queued_run()
        a, b = race(
            lambda: store.claim_queued(run.pk, claimed_by="a", lease_expires=store.lease_until()),
            lambda: store.claim_queued(run.pk, claimed_by="b", lease_expires=store.lease_until()),
        )
        assert not isinstance(a, BaseException) and not isinstance(b, BaseException), (a, b)
        assert sorted([a.applied, b.applied]) == [False, True]
        winner, loser = (a, b) if a.applied else (b, a)
        assert winner.data["request_payload"]["prompt"] == "race" and loser.status == RunStatus.RUNNING
        assert AgentRun.objects.get(pk=run.pk).claimed_by == ("a" if a.applied else "b")


def test_claim_versus_cancel_exactly_one_wins(runtime):
    """A worker claims while an operator cancels: either it runs and the cancel finds it
    running, or it never runs and the stream ends with the cancel's step."""
    for _ in range(ROUNDS):
        run = new_queued_run()
        claim, cancel = race(
            lambda: store.claim_queued(run.pk, claimed_by="w", lease_expires=store.lease_until()),
            lambda: runtime.cancel(run.pk, source=CancelSource.API),
        )
        assert not isinstance(claim, BaseException) and not isinstance(cancel, BaseException), (claim, cancel)
        assert cancel.outcome == CancelOutcome.CANCELLED
        kinds = list(AgentRunEvent.objects.filter(run_id=run.pk).values_list("kind", flat=True))
        if claim.applied:
            assert cancel.previous_status == RunStatus.RUNNING and kinds == []
        else:
            assert cancel.previous_status == RunStatus.QUEUED and claim.status == RunStatus.CANCELLED
            assert kinds == ["cancelled"]


def test_a_limits_cancel_versus_an_operators_cancel_exactly_one_wins_and_its_record_stands(runtime):
    from nrllm_agents.domain import Usage
    from nrllm_agents.runtime import limits

    wins = {"limit": 0, "operator": 0}
    for _ in range(ROUNDS):
        request = RunRequest.from_mapping({"prompt": "race", "script": [{"content": "x"}], "max_total_tokens": 1})
        run = store.begin(request.row_fields(), claimed_by="segment")
        by_limit, by_operator = race(
            lambda: limits.enforce(run.pk, usage=Usage(5, 5)),
            lambda: runtime.cancel(run.pk, source=CancelSource.API, reason="by hand"),
        )
        assert by_limit is not None and by_limit.applied != (by_operator.outcome == CancelOutcome.CANCELLED)
        final = AgentRun.objects.get(pk=run.pk)
        expected = ("budget_exceeded", "system") if by_limit.applied else ("cancelled", "api")
        assert (final.status, final.termination_reason, final.cancel_source) == ("cancelled", *expected)
        assert (final.cancel_detail is not None) == by_limit.applied
        wins["limit" if by_limit.applied else "operator"] += 1
    assert sum(wins.values()) == ROUNDS
