"""Runs in a given state for the unit tests of the store, the segment hook and the runtime,
reached through the store's own transitions (no test writes ``status`` itself)."""

from __future__ import annotations

import contextlib
import datetime as dt
import uuid
from collections.abc import Iterator
from typing import Any

from django.db import OperationalError, connection
from django.utils import timezone

from nrllm_agents import store
from nrllm_agents.domain import Step, StepKind, Usage
from nrllm_agents.models import AgentRun, AgentRunEvent

OWNER = "worker:test:1:0001"
OTHER = "worker:test:2:0002"
FIELDS = {"prompt": "p", "provider": "scripted"}


def step(kind: StepKind = StepKind.REQUEST, round: int = 0, **payload: Any) -> Step:
    return Step(kind, round, payload or {"n": 1})


def running(owner: str = OWNER, *, steps: int = 0, **fields: Any) -> uuid.UUID:
    """A run executing from birth, owned by ``owner``, with ``steps`` recorded steps."""
    run = store.begin({**FIELDS, **fields}, claimed_by=owner, lease_expires=store.lease_until())
    for sequence in range(steps):
        assert store.record_step(run.pk, owner, sequence, step(), timezone.now()) is store.Lease.HELD
    return run.pk


def queued(payload: dict[str, Any] | None = None, **fields: Any) -> uuid.UUID:
    return store.create_queued({**FIELDS, **fields}, payload or {"prompt": "p"}).pk


def waiting(*, steps: int = 1, state: dict[str, Any] | None = None, **fields: Any) -> uuid.UUID:
    """A run suspended for approval after ``steps`` recorded steps."""
    run_id = running(steps=steps, **fields)
    state = state or {"messages": [], "pending_calls": []}
    assert store.suspend(run_id, state=state, iterations=1, usage=Usage(3, 4), owner=OWNER).applied
    return run_id


def completed(**fields: Any) -> uuid.UUID:
    run_id = running(**fields)
    assert store.settle(run_id, status="completed", reason="completed", owner=OWNER).applied
    return run_id


def row(run_id: uuid.UUID) -> AgentRun:
    return AgentRun.objects.get(pk=run_id)


def stream(run_id: uuid.UUID) -> list[AgentRunEvent]:
    return list(AgentRunEvent.objects.filter(run_id=run_id).order_by("sequence"))


def kinds(run_id: uuid.UUID) -> list[str]:
    return [e.kind for e in stream(run_id)]


def expire(run_id: uuid.UUID) -> None:
    """Make a run's lease look expired, as if its worker stopped renewing (died)."""
    AgentRun.objects.filter(pk=run_id).update(lease_expires=timezone.now() - dt.timedelta(seconds=1))


@contextlib.contextmanager
def failing(*prefixes: str) -> Iterator[list[str]]:
    """Statements starting with one of ``prefixes`` (quotes ignored) fail as if the database
    were unreachable; yields the failed statements. Savepoints and the rest go through."""
    failed: list[str] = []

    def wrapper(execute, sql, params, many, context):
        if sql.replace('"', "").lstrip().startswith(prefixes):
            failed.append(sql)
            raise OperationalError("simulated store failure")
        return execute(sql, params, many, context)

    with connection.execute_wrapper(wrapper):
        yield failed


RUN_READ = "SELECT nrllm_agents_agentrun."
RENEWAL = "UPDATE nrllm_agents_agentrun SET lease_expires"
FUSED_BOUNDARY = "WITH renewed AS"
