"""What the runtime's calls return and raise: small values every surface maps."""

from __future__ import annotations

import enum
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from django.conf import settings
from django.utils.translation import ngettext

from ..conf import app_settings
from ..domain import Usage
from ..domain.errors import Kind, KindedError
from ..models import RunStatus


class Outcome(enum.StrEnum):
    """What one segment call ended with (never stored; the status is)."""

    COMPLETED = "completed"  # settled completed
    AWAITING_APPROVAL = "awaiting_approval"  # suspended, waiting for a human decision
    AWAITING_CHILDREN = "awaiting_children"  # suspended until its sub-agent runs end (it holds no worker)
    SUSPEND_FAILED = "suspend_failed"  # wanted to suspend but the row was no longer running
    FAILED = "failed"  # settled failed
    CANCELLED = "cancelled"  # a cancel won the row; the segment stopped at a boundary
    QUEUED = "queued"  # handed to a worker (approve with queued=True)
    WAITING_FOR_QUEUE = "waiting_for_queue"  # stored queued, but the queue was unreachable: dispatched once it is back
    REQUEUED = "requeued"  # handed back to the queue: a transient failure, or this worker shutting down
    LEASE_LOST = "lease_lost"  # this segment lost the run (reaped); it wrote nothing more


class CancelOutcome(enum.StrEnum):
    """What a cancel request did."""

    CANCELLED = "cancelled"  # this call cancelled the run
    ALREADY_CANCELLED = "already_cancelled"  # it was cancelled before; nothing changed
    ALREADY_FINISHED = "already_finished"  # it had completed or failed; nothing changed
    NOT_FOUND = "not_found"  # no such run (or not visible to the caller)


RUN_NOT_FOUND = "Run not found."  # the same words for a run that is absent or not the caller's


class RunNotFound(KindedError, LookupError):
    """No run has this id."""

    kind = Kind.NOT_FOUND

    def __init__(self, run_id: Any) -> None:
        super().__init__(f"run {run_id} not found")
        self.run_id = run_id

    def detail(self) -> str:
        return RUN_NOT_FOUND

    def sentence(self) -> str:
        return "no such run"


class ApprovalNotPending(KindedError, RuntimeError):
    """The run is not waiting for approval, so it cannot be approved or denied.

    Its message is what every surface says (``Run … is completed, not waiting for approval;
    nothing changed.``), a conflict and a failing exit code.
    """

    kind = Kind.CONFLICT

    def __init__(self, run_id: Any, status: str) -> None:
        super().__init__(f"Run {run_id} is {status}, not waiting for approval; nothing changed.")
        self.run_id = run_id
        self.status = status

    def subject(self) -> dict[str, Any]:
        return {"run_id": str(self.run_id), "status": self.status}


class DecisionMismatch(KindedError, RuntimeError):
    """An approval asked of a run whose call is in doubt (a lost worker may have made it), or a
    decision on a doubt asked of a run that has none: each waits for its own kind of decision;
    nothing changed."""

    kind = Kind.CONFLICT

    def __init__(self, run_id: Any, in_doubt: bool) -> None:
        said = (
            "a call of it is in doubt: say whether it happened (resolve), or cancel the run"
            if in_doubt
            else "no call of it is in doubt: approve or deny it"
        )
        super().__init__(f"Run {run_id} waits, but {said}; nothing changed.")
        self.run_id = run_id
        self.in_doubt = in_doubt

    def subject(self) -> dict[str, Any]:
        return {"run_id": str(self.run_id), "in_doubt": self.in_doubt}


class ApprovalAmbiguous(KindedError, RuntimeError):
    """Several runs below the one named wait for approval: which one to decide is for the
    caller to say (``run_id`` in the API, ``--run`` in ``agent_approve``); nothing changed."""

    kind = Kind.CONFLICT

    def __init__(self, run_id: Any, waiting: list[Any]) -> None:
        ids = ", ".join(str(pk) for pk in waiting)
        super().__init__(f"Runs below run {run_id} wait for approval: {ids}; name the one to decide; nothing changed.")
        self.run_id = run_id
        self.waiting = waiting

    def subject(self) -> dict[str, Any]:
        return {"run_id": str(self.run_id), "waiting_for_approval": [str(pk) for pk in self.waiting]}


@dataclass(frozen=True)
class RunResult:
    """What a segment call returns."""

    run_id: uuid.UUID
    outcome: Outcome
    status: str
    termination_reason: str
    steps: int  # steps this segment recorded
    final_text: str | None = None
    usage: Usage = Usage()
    iterations: int = 0
    error: str = ""
    pending_calls: list[dict[str, Any]] = field(default_factory=list)


EXECUTING_STOPS = "the step in flight is interrupted and recorded, then it stops"
"""How a cancel stops a run that a segment is executing, in the words every surface uses."""


@dataclass(frozen=True)
class CancelResult:
    """What ``AgentRuntime.cancel`` did; ``previous_status`` is what the cancel found."""

    run_id: Any
    outcome: CancelOutcome
    status: str | None
    previous_status: str | None
    provider: str | None = None  # the run's provider, when the cancel applied (from the fence)

    @property
    def was_executing(self) -> bool:
        """A segment was executing it: its step in flight is interrupted (``EXECUTING_STOPS``)."""
        return self.outcome == CancelOutcome.CANCELLED and self.previous_status == RunStatus.RUNNING


@dataclass(frozen=True)
class Wording:
    """What every surface says about an outcome, and how it signals it.

    ``text`` follows the run's name (``f"Run {run_id} {text}"``); ``http_status`` is the API's
    and the playground's answer; ``changed`` says whether the call changed the run (a success
    message when it did, a warning when not); ``refused`` means what was asked could not be
    done (a failing exit code for a command).
    """

    text: str
    http_status: int
    changed: bool = True
    refused: bool = False

    def sentence(self, run_id: Any) -> str:
        return f"Run {run_id} {self.text}"


_CANCELLED_FROM = {
    RunStatus.RUNNING: f"cancelled; it was executing: {EXECUTING_STOPS}.",
    RunStatus.QUEUED: "cancelled; it was queued and will never execute.",
    RunStatus.WAITING_FOR_APPROVAL: "cancelled; it was waiting for approval and can no longer be approved.",
    RunStatus.WAITING_FOR_CHILDREN: "cancelled with every run below it; it was waiting for its sub-agents.",
}


def cancel_wording(result: CancelResult) -> Wording:
    """The one wording of what a cancel did, for every surface (API, playground, admin, commands).

    202 when a segment was executing the run (it stops once its step in flight is recorded),
    200 when the run stopped at once or was already cancelled, 409 when it had already
    finished, 404 when there is no such run.
    """
    if result.outcome == CancelOutcome.CANCELLED:
        assert result.previous_status is not None  # a cancel that applied found the run's status
        return Wording(_CANCELLED_FROM[RunStatus(result.previous_status)], 202 if result.was_executing else 200)
    if result.outcome == CancelOutcome.ALREADY_CANCELLED:
        return Wording("was already cancelled; nothing changed.", 200, changed=False)
    if result.outcome == CancelOutcome.ALREADY_FINISHED:
        return Wording(f"had already finished ({result.status}); nothing changed.", 409, changed=False, refused=True)
    return Wording("does not exist; nothing changed.", 404, changed=False, refused=True)


_QUEUED = {
    Outcome.QUEUED: "queued; a worker starts it.",
    Outcome.WAITING_FOR_QUEUE: "queued; the queue is unreachable right now, so a worker starts it once the queue "
    "is back.",
}


# the in-process executor (no REDIS_URL): no worker exists, a thread of this process runs it
LOCAL_EXECUTOR = ("local", "nrllm_agents.executors.local.LocalExecutor")


def _in_process() -> bool:
    """Whether queued runs execute in this process, read as ``executors.chosen()`` reads it
    (``auto`` without ``REDIS_URL``, or the local executor named): words sit below executors."""
    value = str(app_settings.EXECUTOR)
    if value == "auto":
        return not getattr(settings, "REDIS_URL", None)
    return value in LOCAL_EXECUTOR


IN_PROCESS = "queued; this process starts it now (the in-process executor: no worker needed)."


def queued_wording(outcome: Outcome) -> Wording:
    """What every surface says about a run it handed to the workers (``AgentRuntime.submit``,
    ``approve(queued=True)``, a queued ``fork``): a success (202) whether the queue took the job
    at once or was unreachable (the run is stored either way and starts once the queue is back).
    With the in-process executor, it says that this process runs it, not a worker."""
    if outcome == Outcome.QUEUED and _in_process():
        return Wording(IN_PROCESS, 202)
    return Wording(_QUEUED.get(outcome, _QUEUED[Outcome.QUEUED]), 202)


class Counts(Protocol):
    """What a bulk cancel did (``store.BulkCancel``, a frozen dataclass), as the wording reads it.

    Read-only members: a protocol of plain attributes asks for settable ones, which a frozen
    dataclass does not have.
    """

    @property
    def cancelled(self) -> Mapping[str, int]: ...  # previous status -> runs this call cancelled (or would)

    @property
    def unchanged(self) -> Mapping[str, int]: ...  # terminal status -> runs left as they were

    @property
    def dry_run(self) -> bool: ...

    @property
    def cancelled_total(self) -> int: ...


def _runs(n: int) -> str:
    return ngettext("%(n)d run", "%(n)d runs", n) % {"n": n}


def bulk_wording(result: Counts) -> Wording:
    """The one wording of a bulk cancel (or of its dry run), for the admin, the API and
    ``agent_cancel``: ``"3 runs cancelled, 2 runs already finished. 1 of them was executing: …"``.

    200 when anything was (or would be) cancelled, else ``changed`` is false (a warning).
    """
    dry = result.dry_run
    already = result.unchanged.get(RunStatus.CANCELLED, 0)
    finished = sum(n for status, n in result.unchanged.items() if status != RunStatus.CANCELLED)
    parts = (
        [f"{_runs(result.cancelled_total)} {'will be cancelled' if dry else 'cancelled'}"]
        if result.cancelled_total
        else []
    )
    parts += [f"{_runs(finished)} already finished"] if finished else []
    parts += [f"{_runs(already)} already cancelled"] if already else []
    if not parts:
        return Wording("No run matched the selection; nothing changed.", 200, changed=False)
    text = ", ".join(parts) + "."
    executing = result.cancelled.get(RunStatus.RUNNING, 0)
    if executing:
        them = (
            ngettext("%(n)d of them is executing: ", "%(n)d of them are executing: ", executing)
            if dry
            else ngettext("%(n)d of them was executing: ", "%(n)d of them were executing: ", executing)
        )
        text += " " + them % {"n": executing} + f"{EXECUTING_STOPS}."
    if not result.cancelled_total:
        return Wording(f"Nothing to cancel: {text}", 200, changed=False)
    return Wording(text, 200)


class InvalidRunId(KindedError, ValueError):
    """The text is not a run id (a UUID): answered as a run that does not exist."""

    kind = Kind.NOT_FOUND

    def __init__(self, value: Any) -> None:
        super().__init__(f"not a run id: {str(value)[:80]!r}")

    def detail(self) -> str:
        return RUN_NOT_FOUND

    def sentence(self) -> str:
        return "no such run"


def parse_run_id(value: uuid.UUID | str) -> uuid.UUID:
    """A run id from a UUID or its text; raises ``InvalidRunId``."""
    if isinstance(value, uuid.UUID):
        return value
    try:
        return uuid.UUID(str(value).strip())
    except (ValueError, AttributeError, TypeError):
        raise InvalidRunId(value) from None
