"""The Python API for host code (``nrllm_agents.run`` / ``enqueue`` / ``cancel`` / ``post`` /
``status`` / ``steps``) and the signals it sends: a step recorded, a run settled, after the commit,
in the process that executed the run."""

from __future__ import annotations

import threading
from typing import Any

import pytest

import nrllm_agents
from nrllm_agents.models import CancelSource, RunStatus
from tests import waits
from tests.e2e.processes import wait_for

CALC = [{"tool_calls": [{"name": "calculator", "arguments": {"expression": "6*7"}}]}, {"content": "42"}]
LONG = [{"tool_calls": [{"name": "sleep", "arguments": {"seconds": 0.2}}]} for _ in range(50)] + [{"content": "x"}]


class Heard:
    """Receivers of both signals, recording what they were sent and from which thread."""

    def __init__(self) -> None:
        self.steps: list[dict[str, Any]] = []
        self.settled: list[dict[str, Any]] = []

    def step(self, sender: Any, **kwargs: Any) -> None:
        from nrllm_agents.models import AgentRunEvent

        # sent after the commit: the step is there to read, from any connection
        assert AgentRunEvent.objects.filter(run_id=kwargs["run_id"], sequence=kwargs["sequence"]).exists()
        self.steps.append({**kwargs, "thread": threading.get_ident(), "sender": sender})

    def settle(self, sender: Any, **kwargs: Any) -> None:
        self.settled.append({**kwargs, "thread": threading.get_ident()})


@pytest.fixture
def heard():
    ears = Heard()
    nrllm_agents.step_recorded.connect(ears.step)
    nrllm_agents.run_settled.connect(ears.settle)
    yield ears
    nrllm_agents.step_recorded.disconnect(ears.step)
    nrllm_agents.run_settled.disconnect(ears.settle)


# transaction=True: the signals wait for a real commit (on_commit never fires in a test's atomic
# block), and the in-process executor's threads use their own connections.
@pytest.mark.django_db(transaction=True)
def test_run_executes_here_and_the_signals_follow_each_commit(heard) -> None:
    result = nrllm_agents.run("what is 6*7?", tools=["calculator"], script=CALC)
    assert (result.status, result.final_text) == ("completed", "42")
    steps = nrllm_agents.steps(result.run_id)
    assert [s["sequence"] for s in heard.steps] == [s.sequence for s in steps]
    assert [s["kind"] for s in heard.steps] == [s.kind for s in steps]
    assert {s["sender"] for s in heard.steps} == {nrllm_agents.status(result.run_id).__class__}
    assert [(s["run_id"], s["status"], s["final_text"]) for s in heard.settled] == [(result.run_id, "completed", "42")]
    assert heard.settled[0]["thread"] == threading.get_ident()  # the process (thread) that executed it


@pytest.mark.django_db(transaction=True)
def test_enqueue_then_cancel_in_flight(heard, settings) -> None:
    settings.NRLLM_AGENTS = {"EXECUTOR": "local"}
    run_id = nrllm_agents.enqueue("wait", tools=["sleep"], script=LONG, max_iterations=60)
    wait_for(lambda: any(s.kind == "tool" for s in nrllm_agents.steps(run_id)))
    cancelled = nrllm_agents.cancel(run_id, reason="enough")
    assert (cancelled.outcome, cancelled.previous_status) == (nrllm_agents.CancelOutcome.CANCELLED, "running")
    assert waits.wait_local_idle(30)
    row = nrllm_agents.status(run_id)
    assert (row.status, row.cancel_source, row.cancel_reason) == (RunStatus.CANCELLED, CancelSource.CODE, "enough")
    assert nrllm_agents.steps(run_id)[-1].kind == "cancelled"
    assert [(s["run_id"], s["status"]) for s in heard.settled] == [(run_id, "cancelled")]
    assert heard.settled[0]["thread"] != threading.get_ident()  # sent by the executor's thread
    assert nrllm_agents.cancel(run_id).outcome == nrllm_agents.CancelOutcome.ALREADY_CANCELLED


@pytest.mark.django_db(transaction=True)
def test_post_to_a_thread_and_a_receiver_that_fails_does_not_fail_the_run(settings) -> None:
    settings.NRLLM_AGENTS = {"EXECUTOR": "local"}

    def broken(sender: Any, **kwargs: Any) -> None:
        raise RuntimeError("a host's bug")

    nrllm_agents.run_settled.connect(broken)
    try:
        thread = nrllm_agents.create_thread(title="t")
        run_id = nrllm_agents.post(thread.pk, "hello", script=[{"content": "hi"}])
        assert waits.wait_local_idle(30)
    finally:
        nrllm_agents.run_settled.disconnect(broken)
    row = nrllm_agents.status(run_id)
    assert (row.status, row.final_text, row.thread_id) == (RunStatus.COMPLETED, "hi", thread.pk)


@pytest.mark.django_db
def test_bad_requests_and_unknown_runs_raise_with_kinds() -> None:
    with pytest.raises(nrllm_agents.InvalidRequest, match="tools"):
        nrllm_agents.run("x", tools=["no_such_tool"])
    with pytest.raises(nrllm_agents.RunNotFound):
        nrllm_agents.status("00000000-0000-0000-0000-000000000000")
