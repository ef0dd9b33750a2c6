"""Our statuses as the protocol's: one table each for runs and threads (docs/agent-protocol.md)."""

from __future__ import annotations

from ..models import ACTIVE, AgentRun, RunStatus, TerminationReason

# Our run status -> the protocol's ``RunStatus``.
RUN_STATUS: dict[str, str] = {
    RunStatus.QUEUED: "pending",
    RunStatus.RUNNING: "running",
    RunStatus.WAITING_FOR_APPROVAL: "interrupted",  # an interrupt awaits a human (the thread says which)
    RunStatus.WAITING_FOR_CHILDREN: "running",  # its sub-agents' runs work for it (runtime.trees)
    RunStatus.COMPLETED: "success",
    RunStatus.FAILED: "error",
    RunStatus.CANCELLED: "interrupted",
}
TIMED_OUT = {TerminationReason.DEADLINE_EXCEEDED}  # a deadline's cancel reads ``timeout``


def run_status(run: AgentRun) -> str:
    """The protocol's status of ``run``."""
    if run.status == RunStatus.CANCELLED and run.termination_reason in TIMED_OUT:
        return "timeout"
    return RUN_STATUS[run.status]


def thread_status(last: AgentRun | None) -> str:
    """A thread's status from its latest run the protocol shows: ``busy`` while it moves,
    ``interrupted`` while it waits for approval, ``error`` when it failed, else ``idle``."""
    if last is None:
        return "idle"
    if last.status == RunStatus.WAITING_FOR_APPROVAL:
        return "interrupted"
    if last.status in ACTIVE or (last.status == RunStatus.CANCELLED and last.stopped_at is None):
        return "busy"
    return "error" if last.status == RunStatus.FAILED else "idle"


def finished(run: AgentRun) -> bool:
    """Whether a run has nothing more to do for now (what ``wait``, ``join`` and a stream wait
    for): settled, waiting for approval, or cancelled and stopped."""
    if run.status == RunStatus.CANCELLED:
        return run.stopped_at is not None
    return run.status not in (RunStatus.QUEUED, RunStatus.RUNNING)
