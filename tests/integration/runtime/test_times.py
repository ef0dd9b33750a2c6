"""A run's times are in order, ``created_at <= started_at <= stopped_at <= finished_at``, on every
path that starts or stops a run (issue 32, item 12); the database refuses a row out of order
(``models.TIMES_IN_ORDER``). ``stopped_at`` is the moment the work stopped: the end of the step a
cancel cut short, not the write of the ``cancelled`` step after it (item 15).

``transaction=True``: the interrupted segments run on threads of their own, with their own
connections, and must see the cancel commit.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from nrllm_agents import store
from nrllm_agents.executors import dispatch
from nrllm_agents.models import AgentRun, AgentRunEvent, RunStatus
from nrllm_agents.runtime.agent_runtime import AgentRuntime, Outcome
from nrllm_agents.validation.run_request import RunRequest
from tests.integration.live.test_interrupt import (  # noqa: F401 (autouse: the SQLite poll every 0.1 s)
    LONG_ANSWER,
    LONG_SLEEP,
    Segment,
    ensure_signal_path,
    fast_poll,
    started_tool,
)

pytestmark = pytest.mark.django_db(transaction=True)

NOTE = [{"tool_calls": [{"name": "write_note", "arguments": {"title": "t", "body": "b"}}]}, {"content": "noted"}]


def assert_in_order(run_id: Any) -> AgentRun:
    run = AgentRun.objects.get(pk=run_id)
    times = [t for t in (run.created_at, run.started_at, run.stopped_at, run.finished_at) if t is not None]
    assert times == sorted(times), (run.status, run.created_at, run.started_at, run.stopped_at, run.finished_at)
    return run


def request(script: list[dict[str, Any]], tools: list[str] | None = None) -> dict[str, Any]:
    return {"prompt": "p", "script": script, "tools": tools or []}


@pytest.mark.parametrize(
    "change",
    [
        {"started_at": F("created_at") - timedelta(milliseconds=1)},
        {"stopped_at": F("started_at") - timedelta(milliseconds=1)},
        {"finished_at": F("stopped_at") - timedelta(milliseconds=1)},
        {"started_at": None, "stopped_at": F("created_at") - timedelta(milliseconds=1)},
    ],
)
def test_the_database_refuses_a_run_whose_times_are_out_of_order(change):
    run = store.begin(RunRequest.from_mapping(request([{"content": "x"}])).row_fields())
    assert store.settle(run.pk, status=RunStatus.COMPLETED, reason="completed").applied
    with pytest.raises(IntegrityError), transaction.atomic():
        AgentRun.objects.filter(pk=run.pk).update(**change)
    assert_in_order(run.pk)


def test_an_interactive_run_is_created_and_started_at_one_moment():
    result = AgentRuntime().run(request([{"content": "x"}]))
    run = assert_in_order(result.run_id)
    assert run.started_at == run.created_at and run.finished_at == run.stopped_at


def test_every_path_that_starts_or_stops_a_run_keeps_its_times_in_order(monkeypatch):
    monkeypatch.setattr(dispatch, "dispatch", lambda run_id, **kw: None)  # nobody else claims them: this test does
    runtime = AgentRuntime()
    ids = [runtime.run(request([{"content": "x"}])).run_id]  # interactive
    queued = runtime.enqueue(request([{"content": "x"}]))  # queued, then claimed
    assert runtime.run_queued(queued) is not None
    ids.append(queued)
    ids.append(runtime.fork(queued, queued=False).run_id)  # a fork run here
    fork = runtime.fork(queued).run_id  # a queued fork, then claimed
    assert runtime.run_queued(fork) is not None
    ids.append(fork)
    waiting = runtime.run(request(NOTE, ["write_note"])).run_id  # suspended, approved here
    assert runtime.approve(waiting, True).outcome == Outcome.COMPLETED
    ids.append(waiting)
    later = runtime.run(request(NOTE, ["write_note"])).run_id  # suspended, then queued by the approval
    runtime.approve(later, True, queued=True)
    assert runtime.run_queued(later) is not None
    ids.append(later)
    for script, tools in ([{"content": "x"}], []), (NOTE, ["write_note"]):  # cancelled quiescent
        one = runtime.enqueue(request(script, tools))
        ids.append(one)
        assert runtime.cancel(one, source="system").outcome == "cancelled"
    denied = runtime.run(request(NOTE, ["write_note"])).run_id
    assert runtime.cancel(denied, source="system").outcome == "cancelled"
    ids.append(denied)
    many = [runtime.enqueue(request([{"content": "x"}])) for _ in range(2)]
    runtime.cancel_many(AgentRun.objects.filter(pk__in=many), source="system")
    ids += many
    # A dead segment's runs: one reaped to the dead letter, one cancelled and acknowledged by the reaper.
    gone = timezone.now() - timedelta(seconds=1)
    fields = RunRequest.from_mapping(request([{"content": "x"}])).row_fields()
    dead = store.begin(fields, claimed_by="worker:gone:1", lease_expires=gone)
    AgentRun.objects.filter(pk=dead.pk).update(attempts=99)
    orphan = store.begin(fields, claimed_by="worker:gone:2", lease_expires=gone)
    store.cancel(orphan.pk, source="system")
    store.reap()
    ids += [dead.pk, orphan.pk]
    for run_id in ids:
        assert_in_order(run_id)
    assert AgentRun.objects.get(pk=dead.pk).status == RunStatus.FAILED
    assert AgentRun.objects.get(pk=orphan.pk).stopped_at is not None


@pytest.mark.parametrize("script", ["model", "tool"])
def test_stopped_at_is_the_end_of_the_step_the_cancel_cut_short(script, monkeypatch):
    """The interrupted step's end is the stop, recorded with it; the ``cancelled`` step is
    written after it, and ``finished_at`` (the cancel's own time until then) follows the stop."""
    ensure_signal_path()
    started = started_tool(monkeypatch)
    segment = Segment(request([LONG_ANSWER]) if script == "model" else request(LONG_SLEEP, ["sleep"])).start()
    assert (segment.streaming if script == "model" else started).wait(10), "the step never started"
    segment.cancel("store")
    assert segment.join().outcome == Outcome.CANCELLED
    run = assert_in_order(segment.run_id)
    steps = list(AgentRunEvent.objects.filter(run_id=run.pk).order_by("sequence"))
    interrupted, cancelled = steps[-2], steps[-1]
    assert interrupted.payload.get("interrupted") is True and cancelled.kind == "cancelled"
    assert run.stopped_at == interrupted.created_at == run.finished_at
    assert run.cancel_requested_at <= run.stopped_at <= cancelled.created_at
