"""Each hot transition with a PostgreSQL statement of its own writes exactly what its portable
fence writes: the same row and, for the cancel, the same ``cancelled`` step (issue 34). The bulk
cancel's step is the single cancel's step too.

Two runs in the same state; one goes through the statement (``prepared.enabled()`` true), the
other through the fence (answered False, the path SQLite always takes); their rows are then
compared column by column, times by their presence and their order (created ≤ started ≤
stopped ≤ finished), not their value.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.contrib.auth import get_user_model

from nrllm_agents import store
from nrllm_agents.models import AgentRun, AgentRunEvent, TerminationReason
from nrllm_agents.store import prepared
from tests.integration.runs import queued, running, waiting

pytestmark = [pytest.mark.postgres_only, pytest.mark.django_db]

TIMES = ("created_at", "started_at", "stopped_at", "finished_at", "cancel_requested_at", "lease_expires")
IN_ORDER = ("created_at", "started_at", "stopped_at", "finished_at")
ISO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}\+00:00$")


def shape(run_id) -> dict[str, Any]:
    """The run's row with its id and the values of its times left out (their presence kept,
    their order checked)."""
    values = AgentRun.objects.filter(pk=run_id).values().get()
    values.pop("id")
    times = [values[name] for name in IN_ORDER if values[name] is not None]
    assert times == sorted(times), {name: values[name] for name in IN_ORDER}
    for name in TIMES:
        values[name] = values[name] is not None
    return values


def cancelled_step(run_id) -> dict[str, Any] | None:
    event = AgentRunEvent.objects.filter(run_id=run_id, kind="cancelled").values("sequence", "round", "payload").first()
    if event is None:
        return None
    requested = event["payload"].pop("requested_at")
    assert ISO.match(requested), requested  # both paths: microseconds always, UTC offset
    return event


def both(make, act, monkeypatch) -> tuple[tuple[dict, Any], tuple[dict, Any]]:
    assert prepared.enabled()
    first, second = make(), make()
    act(first)
    with monkeypatch.context() as patch:
        patch.setattr(prepared, "enabled", lambda: False)
        act(second)
    return (shape(first), cancelled_step(first)), (shape(second), cancelled_step(second))


@pytest.mark.parametrize("state", ["queued", "waiting", "running"])
@pytest.mark.parametrize("limit", [None, {"kind": "deadline", "seconds": 5}])
def test_the_cancel_writes_the_same_row_and_step_on_both_paths(state, limit, monkeypatch):
    user = get_user_model().objects.create_user("ada")
    make = {"queued": queued, "waiting": waiting, "running": running}[state]

    def act(run_id):
        done = store.cancel(
            run_id,
            by=user,
            source="api",
            reason="enough",
            termination_reason=TerminationReason.DEADLINE_EXCEEDED if limit else TerminationReason.CANCELLED,
            detail=limit,
        )
        assert done.applied, done

    statement, fence = both(make, act, monkeypatch)
    assert statement == fence
    if state != "running":  # a quiescent run's cancelled step is written by the cancel itself
        assert statement[1] is not None and statement[1]["payload"]["by"] == "ada"


@pytest.mark.parametrize("state", ["queued", "waiting", "running"])
def test_the_bulk_cancel_writes_the_single_cancels_row_and_step_on_both_paths(state, monkeypatch):
    user = get_user_model().objects.create_user("ada")
    make = {"queued": queued, "waiting": waiting, "running": running}[state]

    def act(run_id):
        done = store.cancel_many(AgentRun.objects.filter(pk=run_id), by=user, source="api", reason="enough")
        assert done.cancelled_total == 1, done

    statement, portable = both(make, act, monkeypatch)
    assert statement == portable
    single = make()
    assert store.cancel(single, by=user, source="api", reason="enough").applied
    assert (shape(single), cancelled_step(single)) == statement
    if state != "running":
        assert statement[1] is not None and statement[1]["payload"]["termination_reason"] == "cancelled"


def test_the_claim_writes_the_same_row_on_both_paths(monkeypatch):
    def act(run_id):
        done = store.claim_queued(run_id, claimed_by="worker:x:1:0001")
        assert done.applied and done.data["request_payload"] is not None, done

    statement, fence = both(queued, act, monkeypatch)
    assert statement == fence


def test_the_step_boundary_writes_the_same_row_and_step_on_both_paths(monkeypatch):
    from django.utils import timezone

    from nrllm_agents.domain import Step, StepKind
    from tests.integration.runs import OWNER

    at = timezone.now()

    def act(run_id):
        step = Step(StepKind.LLM, 1, {"content": "ok", "usage": {"prompt_tokens": 3}}, duration_ms=12)
        assert store.record_step(run_id, OWNER, 0, step, at) is store.Lease.HELD

    def events(run_id):
        return list(
            AgentRunEvent.objects.filter(run_id=run_id).values(
                "sequence", "kind", "round", "duration_ms", "payload", "created_at"
            )
        )

    first, second = running(), running()
    act(first)
    with monkeypatch.context() as patch:
        patch.setattr(prepared, "enabled", lambda: False)
        act(second)
    assert shape(first) == shape(second)
    assert events(first) == events(second) and len(events(first)) == 1
