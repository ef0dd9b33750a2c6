"""Runs whose call is in doubt (issue 47), reached as in production, for the tests of the pages a
person decides on: ``slow_note`` (``nrllm_agents.testing.tools.SlowNote``, a non-idempotent
effect) writes its note, and its worker is lost before the step is recorded; the reaper hands
the run back, and the next segment suspends it with the call in doubt.

The first segment runs in the test's own thread, lost by ``SystemExit`` (nothing in the runtime
handles it, as nothing would run after a SIGKILL). Tests that use it configure the tool
(``SLOW_NOTE`` in ``NRLLM_AGENTS["TOOLS"]``, ``NRLLM_EXTRA_TOOLS`` for a server).
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from nrllm_agents import store
from nrllm_agents.executors import dispatch
from nrllm_agents.models import AgentRun, AgentRunEvent, Note, RunStatus
from nrllm_agents.runtime.agent_runtime import Outcome
from nrllm_agents.testing.tools import SlowNote
from tests.integration.runs import expire

SLOW_NOTE = {"slow_note": "nrllm_agents.testing.tools.SlowNote"}


def _lost_after_the_effect(self: SlowNote, arguments: dict[str, Any]) -> Any:
    Note.objects.create(run_id=self.run_id, title=arguments["title"], body="written before the worker was lost")
    raise SystemExit("worker killed")  # after the effect, before its step


def lost_in_doubt(runtime: Any, *, owner: Any = None, title: str = "pay the invoice") -> uuid.UUID:
    """A run of ``owner`` waiting with its ``slow_note`` call in doubt; its note written once."""
    run_id = lost(runtime, owner=owner, title=title)
    reaped_into_doubt(runtime, run_id)
    return run_id


def lost(runtime: Any, *, owner: Any = None, title: str = "pay the invoice") -> uuid.UUID:
    """A run of ``owner`` whose worker was lost during its ``slow_note`` call, after the note was
    written: still ``running``, with the write fence's stamp, until it is reaped."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(dispatch, "dispatch", lambda run_id, **kwargs: None)  # this thread is the worker
        patch.setattr(SlowNote, "execute", _lost_after_the_effect)
        script = [{"tool_calls": [{"name": "slow_note", "arguments": {"title": title}}]}, {"content": "noted"}]
        run_id = runtime.enqueue({"prompt": "note it", "tools": ["slow_note"], "script": script}, owner=owner)
        with pytest.raises(SystemExit):
            runtime.run_queued(run_id)
    return run_id


def reaped_into_doubt(runtime: Any, run_id: uuid.UUID) -> None:
    """Reap the ``lost`` run and continue it here: it suspends with its call in doubt."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(dispatch, "dispatch", lambda run_id, **kwargs: None)  # this thread is the worker
        expire(run_id)
        assert run_id in store.reap().requeued
        assert runtime.run_queued(run_id).outcome == Outcome.AWAITING_APPROVAL
    run = AgentRun.objects.get(pk=run_id)
    assert run.status == RunStatus.WAITING_FOR_APPROVAL
    assert run.suspended_state["in_doubt"]["call"]["name"] == "slow_note"
    assert Note.objects.filter(run_id=run_id).count() == 1


@pytest.fixture
def doubted(settings, monkeypatch):
    """``slow_note`` configured, queued runs in this process, and no job dispatched: after a
    decision is handed to the queue, the test plays the worker (``run_queued``)."""
    settings.REDIS_URL = None
    settings.NRLLM_AGENTS = {**settings.NRLLM_AGENTS, "TOOLS": SLOW_NOTE}
    monkeypatch.setattr(dispatch, "dispatch", lambda run_id, **kwargs: None)


def steps(run_id: uuid.UUID, kind: str) -> list[dict[str, Any]]:
    """The payloads of the run's steps of ``kind``, in order."""
    return list(
        AgentRunEvent.objects.filter(run_id=run_id, kind=kind).order_by("sequence").values_list("payload", flat=True)
    )


def unchanged(run_id: uuid.UUID) -> bool:
    """Still waiting with its call in doubt, no decision recorded, the note written once."""
    run = AgentRun.objects.get(pk=run_id)
    return (
        run.status == RunStatus.WAITING_FOR_APPROVAL
        and run.suspended_state.get("in_doubt") is not None
        and not steps(run_id, "approval")
        and Note.objects.filter(run_id=run_id).count() == 1
    )
