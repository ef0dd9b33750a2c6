"""The Python API for host code, re-exported by ``nrllm_agents`` (docs/reference/python-api.md):
start a run here or on the queue, cancel one, post to a thread, read a run and its steps.

Thin over ``AgentRuntime`` (the engine every surface uses), so a run started here is the same
durable, cancellable row as one started from the API or the admin. Bad requests raise
``InvalidRequest`` with the field named; run outcomes are return values, never exceptions.
"""

from __future__ import annotations

import uuid
from typing import Any

from ..models import AgentRun, AgentRunEvent, CancelSource, Thread
from ..presentation.outcomes import CancelResult, RunResult
from . import threads
from .agent_runtime import AgentRuntime
from .segment import StepObserver

_runtime = AgentRuntime()


def run(prompt: str, /, *, owner: Any = None, on_step: StepObserver | None = None, **fields: Any) -> RunResult:
    """Execute a run in this thread and return when it settles (or waits for an approval).

    Parameters
    ----------
    prompt:
        The user's message.
    owner:
        The user who owns the run (``None``: nobody; only staff see it).
    on_step:
        Called with each step (a dict) as it is recorded.
    fields:
        The rest of a run request, as the REST API takes it: ``tools``, ``provider``, ``model``,
        ``connection``, ``agent``, ``max_iterations``, ``deadline_seconds``, ``max_cost``, ``script``...

    Returns
    -------
    A ``RunResult``: ``run_id``, ``outcome``, ``status``, ``final_text``, ``usage``...
    """
    return _runtime.run({"prompt": prompt, **fields}, owner=owner, on_step=on_step)


def enqueue(prompt: str, /, *, owner: Any = None, **fields: Any) -> uuid.UUID:
    """Store a queued run and hand it to the executor (RQ workers, or this process's threads)
    once the transaction commits; returns its id. ``fields`` as for :func:`run`."""
    return _runtime.enqueue({"prompt": prompt, **fields}, owner=owner)


def cancel(run_id: uuid.UUID | str, *, by: Any = None, reason: str = "") -> CancelResult:
    """Cancel a run: a queued or waiting one stops at once, an executing one at its call in flight.

    Returns a ``CancelResult`` whose ``outcome`` says what happened (``cancelled``,
    ``already_cancelled``, ``already_finished``, ``not_found``); terminal is terminal.
    """
    return _runtime.cancel(run_id, by=by, source=CancelSource.CODE, reason=reason)


def create_thread(*, owner: Any = None, title: str = "") -> Thread:
    """A new, empty conversation thread."""
    return threads.create(owner=owner, title=title)


def post(
    thread_id: uuid.UUID | str, prompt: str, /, *, owner: Any = None, strategy: str | None = None, **fields: Any
) -> uuid.UUID:
    """Post a message to a thread: a queued run that sees the thread's conversation so far.

    ``strategy`` says what happens while another run of the thread is active (``reject``,
    ``enqueue``, ``interrupt``, ``rollback``; default ``THREAD_MULTITASK_STRATEGY``). Raises
    ``ThreadNotFound``, or ``ThreadBusy`` under ``reject``. Returns the new run's id.
    """
    return _runtime.post(thread_id, {"prompt": prompt, **fields}, owner=owner, strategy=strategy)


def status(run_id: uuid.UUID | str) -> AgentRun:
    """The run's row as it is now (``status``, ``termination_reason``, ``final_text``...); raises
    ``RunNotFound``."""
    return _runtime.status(run_id)


def steps(run_id: uuid.UUID | str, *, after: int = -1, limit: int | None = None) -> list[AgentRunEvent]:
    """The run's recorded steps after sequence ``after``, in order."""
    return _runtime.events(run_id, after=after, limit=limit)
