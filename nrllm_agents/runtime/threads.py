"""Threads: conversations whose runs follow a multitask strategy when a message arrives early.

A message posted to a thread becomes a run at the thread's next position. Its runs execute one at
a time, in position order: a run is dispatched only when every run before it has stopped
(``stopped_at`` set), and its claim checks the same (``waits``), so no delivery or race can start
two at once; when one stops, the runtime dispatches ``next_up``. Every post takes the thread's
row lock, so concurrent messages get distinct, ordered positions. A message arriving while a run
is active follows the thread's strategy: ``reject`` (``ThreadBusy``), ``enqueue``, ``interrupt``
(cancel the active runs through ``AgentRuntime.cancel``, continue from their transcript) or
``rollback`` (the same, and the cancelled runs' turns leave the transcript).

A run's first step (``thread``) holds the transcript it started from, so every run's stream stands
alone. The strategies, as a user sees them: docs/howto/threads.md.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.db.models import Exists, Max, OuterRef, QuerySet
from django.utils import timezone

from ..conf import app_settings
from ..domain import Step, StepKind
from ..domain.errors import Kind, KindedError
from ..domain.thread import opening_payload, transcript_after
from ..models import ACTIVE, AgentRun, AgentRunEvent, CancelSource, MultitaskStrategy, TerminationReason, Thread
from ..presentation.presenters import event_dict
from ..validation.run_request import InvalidRequest, RunRequest

logger = logging.getLogger(__name__)

STRATEGIES = tuple(s.value for s in MultitaskStrategy)


THREAD_NOT_FOUND = "Thread not found."  # the same words for a thread that is absent or not the caller's


class ThreadNotFound(KindedError, LookupError):
    """No thread with this id."""

    kind = Kind.NOT_FOUND

    def __init__(self, thread_id: Any) -> None:
        super().__init__(f"thread {thread_id} not found")
        self.thread_id = thread_id

    def detail(self) -> str:
        return THREAD_NOT_FOUND

    def sentence(self) -> str:
        return "no such thread"


class ThreadBusy(KindedError, RuntimeError):
    """A run of the thread is still queued, running or waiting, and the message said ``reject``."""

    kind = Kind.CONFLICT

    def subject(self) -> dict[str, Any]:
        return {"thread_id": str(self.thread_id), "run_id": str(self.run_id), "status": self.status}

    def detail(self) -> str:
        return f"The thread is busy: run {self.run_id} is {self.status}; nothing was created."

    def sentence(self) -> str:
        return f"Not sent: run {self.run_id} is still {self.status}."

    def __init__(self, thread_id: Any, run_id: Any, status: str) -> None:
        super().__init__(f"thread {thread_id} is busy: run {run_id} is {status}; nothing was created")
        self.thread_id = thread_id
        self.run_id = run_id
        self.status = status


@dataclass(frozen=True)
class Place:
    """Where a run stands in its thread."""

    thread_id: uuid.UUID
    position: int


def default_strategy() -> str:
    """The strategy of a message that names none (``NRLLM_AGENTS["THREAD_MULTITASK_STRATEGY"]``)."""
    return str(app_settings.THREAD_MULTITASK_STRATEGY)


def strategy_of(value: Any) -> str:
    """``value`` as a strategy (``None``: the default); raises ``InvalidRequest`` naming the choices."""
    if value is None or value == "":
        return default_strategy()
    if value not in STRATEGIES:
        raise InvalidRequest({"multitask_strategy": f"one of {', '.join(STRATEGIES)}"})
    return str(value)


def parse_thread_id(value: Any) -> uuid.UUID:
    """A thread id from text; raises ``ThreadNotFound`` for anything that is not one."""
    try:
        return value if isinstance(value, uuid.UUID) else uuid.UUID(str(value))
    except (ValueError, TypeError, AttributeError):
        raise ThreadNotFound(value) from None


def create(*, owner: Any = None, title: str = "") -> Thread:
    """A new, empty thread owned by ``owner``."""
    return Thread.objects.create(owner=owner if getattr(owner, "pk", None) else None, title=title[:200])


def _unstopped(thread_id: uuid.UUID) -> QuerySet[AgentRun]:
    return AgentRun.objects.filter(thread_id=thread_id, stopped_at__isnull=True)


def post(
    runtime: Any,
    thread_id: uuid.UUID | str,
    request: RunRequest,
    *,
    owner: Any = None,
    strategy: str | None = None,
) -> uuid.UUID:
    """Post a message (``request.prompt``) to a thread and return its run's id (queued).

    Raises ``ThreadNotFound``, ``InvalidRequest`` (a bad strategy), ``ThreadBusy`` (``reject``
    while a run is active; nothing is created). ``runtime`` is the ``AgentRuntime``.
    """
    chosen = strategy_of(strategy)
    thread_pk = parse_thread_id(thread_id)
    run_id = uuid.uuid4()
    with transaction.atomic():
        thread = Thread.objects.select_for_update().filter(pk=thread_pk).first()
        if thread is None:
            raise ThreadNotFound(thread_pk)
        active = list(
            AgentRun.objects.filter(thread=thread, status__in=[s.value for s in ACTIVE])
            .order_by("thread_position")
            .values_list("pk", "status")
        )
        if active and chosen == MultitaskStrategy.REJECT:
            raise ThreadBusy(thread.pk, *active[0])
        if active and chosen in (MultitaskStrategy.INTERRUPT, MultitaskStrategy.ROLLBACK):
            reason = f"interrupted by message {run_id} of thread {thread.pk} ({chosen})"
            cancelled = [
                pk
                for pk, _ in active
                if runtime.cancel(
                    pk,
                    source=CancelSource.SYSTEM,
                    reason=reason,
                    termination_reason=TerminationReason.INTERRUPTED_BY_MESSAGE,
                ).outcome
                == "cancelled"
            ]
            if chosen == MultitaskStrategy.ROLLBACK and cancelled:
                AgentRun.objects.filter(pk__in=cancelled).update(rolled_back=True)
        last = AgentRun.objects.filter(thread=thread).aggregate(m=Max("thread_position"))["m"]
        position = 0 if last is None else last + 1
        ready = not _unstopped(thread.pk).exists()
        fields = {"id": run_id, "thread": thread, "thread_position": position, "multitask_strategy": chosen}
        runtime.enqueue(request, owner=owner, fields=fields, wake=ready)
        Thread.objects.filter(pk=thread.pk).update(last_activity_at=timezone.now())
    return run_id


def place(run_id: uuid.UUID) -> Place | None:
    """The run's place in its thread, or ``None`` for a run of no thread."""
    row = AgentRun.objects.filter(pk=run_id, thread__isnull=False).values_list("thread_id", "thread_position").first()
    return Place(row[0], row[1] or 0) if row else None


def waits(where: Place) -> bool:
    """Whether a run at ``where`` must still wait: a run before it has not stopped."""
    return _unstopped(where.thread_id).filter(thread_position__lt=where.position).exists()


def next_up(thread_id: uuid.UUID | None) -> uuid.UUID | None:
    """The thread's queued head to dispatch now (every run before it stopped), if any.

    Takes the thread's lock, so a message being posted meanwhile is seen once committed.
    """
    if thread_id is None:
        return None
    with transaction.atomic():
        Thread.objects.select_for_update().filter(pk=thread_id).values_list("pk", flat=True).first()
        head = _unstopped(thread_id).order_by("thread_position").values_list("pk", "status").first()
    return head[0] if head and head[1] == "queued" else None


def threads_among(runs: Any) -> list[uuid.UUID]:
    """The threads of the active runs of a queryset (before a bulk cancel stops them)."""
    active = runs.filter(thread__isnull=False, status__in=[s.value for s in ACTIVE])
    return list(active.order_by().values_list("thread_id", flat=True).distinct())


def thread_of(run_id: uuid.UUID) -> uuid.UUID | None:
    """The thread of a run, or ``None``."""
    found: uuid.UUID | None = AgentRun.objects.filter(pk=run_id).values_list("thread_id", flat=True).first()
    return found


def took_a_turn() -> Exists:
    """Runs that started: they recorded their opening ``thread`` step, and so leave a turn (their
    message, and whatever answer they recorded: whole, interrupted, or none when a cancel came
    before the first model call: the user's message is never lost). A run that never started
    (cancelled while queued: its only step the ``cancelled`` one) leaves none."""
    return Exists(AgentRunEvent.objects.filter(run_id=OuterRef("pk"), kind=StepKind.THREAD))


def transcript(thread_id: uuid.UUID, *, before: int | None = None) -> tuple[list[dict[str, Any]], uuid.UUID | None]:
    """The messages a run at position ``before`` (default: the next one) starts from, and the
    run they come from: the latest earlier run that is not rolled back and took a turn.

    That run's stream opens with the transcript before it (its ``thread`` step, built the same
    way when it started), so a run without a turn carries that transcript through, whole.
    """
    runs = _turns(thread_id, before)
    base = runs.order_by("-thread_position").values_list("pk", "status", "purged_at").first()
    if base is None:
        return [], None
    if base[2] is not None:  # its content was purged (retention): nothing is left of the turns before
        return [], base[0]
    steps = [event_dict(e) for e in AgentRunEvent.objects.filter(run_id=base[0]).order_by("sequence")]
    return transcript_after(steps, status=base[1]), base[0]


def _turns(thread_id: uuid.UUID, before: int | None) -> QuerySet[AgentRun]:
    runs = AgentRun.objects.filter(thread_id=thread_id, rolled_back=False).filter(took_a_turn())
    return runs if before is None else runs.filter(thread_position__lt=before)


def purged_turns(thread_id: uuid.UUID, *, before: int | None = None) -> int:
    """How many of the turns a run at position ``before`` (default: the next one) would follow
    had their content purged by the retention policy: the transcript it starts from lacks them."""
    return _turns(thread_id, before).filter(purged_at__isnull=False).count()


def opening(where: Place, request: RunRequest) -> Step:
    """The first step of a thread's run: the transcript it starts from, then its message. When
    the turn it follows was purged (retention), it starts from what is left and says so."""
    messages, after = transcript(where.thread_id, before=where.position)
    payload = opening_payload(
        messages,
        prompt=request.prompt,
        system=request.system,
        thread_id=str(where.thread_id),
        position=where.position,
        after_run=str(after) if after else None,
    )
    purged = purged_turns(where.thread_id, before=where.position) if after is not None else 0
    if purged and not messages:
        payload["purged_turns"] = purged  # the earlier turns' content is gone: the model sees none of it
    return Step(StepKind.THREAD, 0, payload)


@dataclass
class PurgeReport:
    """What one purge did (or would do)."""

    threads: list[uuid.UUID] = field(default_factory=list)
    runs: int = 0
    skipped_active: int = 0  # inactive threads kept because a run of theirs has not stopped
    dry_run: bool = False

    def summary(self) -> str:
        verb = "would purge" if self.dry_run else "purged"
        text = f"{verb} {len(self.threads)} thread(s) and their {self.runs} run(s)"
        if self.skipped_active:
            text += f"; kept {self.skipped_active} with a run that has not stopped"
        return text


def purge(*, inactive_for: timedelta, dry_run: bool = False, now: datetime | None = None) -> PurgeReport:
    """Delete threads without a message for ``inactive_for``, with their runs and steps.

    A thread with a run that has not stopped is kept. Only the thread's own runs go: a fork
    of one of them (a run of no thread, or of another thread) stays, its ``parent`` emptied,
    and notes its runs wrote stay, their ``run`` emptied.
    """
    cutoff = (now or timezone.now()) - inactive_for
    report = PurgeReport(dry_run=dry_run)
    with transaction.atomic():
        stale = Thread.objects.filter(last_activity_at__lt=cutoff)
        if not dry_run:  # a message posted meanwhile waits for this lock, then finds no thread
            stale = stale.select_for_update()
        candidates = list(stale.values_list("pk", flat=True))
        busy = set(
            AgentRun.objects.filter(thread_id__in=candidates, stopped_at__isnull=True).values_list(
                "thread_id", flat=True
            )
        )
        report.skipped_active = len(busy)
        report.threads = [pk for pk in candidates if pk not in busy]
        report.runs = AgentRun.objects.filter(thread_id__in=report.threads).count()
        if not dry_run and report.threads:
            AgentRun.objects.filter(thread_id__in=report.threads).delete()  # their steps go with them
            Thread.objects.filter(pk__in=report.threads).delete()
    return report
