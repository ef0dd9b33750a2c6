"""Runs, their append-only step stream, and notes written by the ``write_note`` tool.

Only ``nrllm_agents.store`` writes ``AgentRun.status``.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import models
from django.utils import timezone


class RunStatus(models.TextChoices):
    """Where a run is in its lifecycle."""

    QUEUED = "queued"  # stored, waiting for a worker to claim it
    RUNNING = "running"  # a segment is executing it
    WAITING_FOR_APPROVAL = "waiting_for_approval"  # suspended until a human decides
    COMPLETED = "completed"  # ended by the segment (answer, cap or denial)
    FAILED = "failed"  # ended by an error
    CANCELLED = "cancelled"  # ended by an operator


TERMINAL = frozenset({RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED})
ACTIVE = frozenset({RunStatus.QUEUED, RunStatus.RUNNING, RunStatus.WAITING_FOR_APPROVAL})


class TerminationReason(models.TextChoices):
    """Why a run ended; separate from its status."""

    COMPLETED = "completed"  # the model gave its final answer
    MAX_ITERATIONS = "max_iterations"  # the iteration cap was reached
    PROVIDER_FAILED = "provider_failed"  # the model server failed
    TOOL_FAILED = "tool_failed"  # a tool raised unexpectedly
    APPROVAL_DENIED = "approval_denied"  # a denial ended the run
    CANCELLED = "cancelled"  # an operator cancelled it
    DEADLINE_EXCEEDED = "deadline_exceeded"  # its deadline passed; cancelled by the system
    BUDGET_EXCEEDED = "budget_exceeded"  # its token budget was spent; cancelled by the system
    ENQUEUE_FAILED = "enqueue_failed"  # the queue could not take the job
    INVALID_REQUEST = "invalid_request"  # the stored request could not be rehydrated
    RETRIES_EXHAUSTED = "retries_exhausted"  # transient failures or lost workers used up the requeue budget
    NOT_RETRYABLE = "not_retryable"  # a permanent failure, or a lost worker during a non-idempotent tool
    INTERNAL_ERROR = "internal_error"  # an unexpected error in the runtime


class CancelSource(models.TextChoices):
    """Where a cancel came from."""

    ADMIN = "admin", "admin"  # the Django admin
    CLI = "cli", "CLI"  # manage.py agent_cancel (or Ctrl-C in agent_run)
    API = "api", "API"  # the REST API
    PLAYGROUND = "playground", "playground"  # the playground's Cancel button
    SYSTEM = "system", "system (a limit)"  # the application itself


class AgentRun(models.Model):
    """One agent task from creation to a terminal status."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="agent_runs"
    )
    status = models.CharField(max_length=32, choices=RunStatus.choices, default=RunStatus.QUEUED)
    termination_reason = models.CharField(max_length=32, choices=TerminationReason.choices, blank=True)

    prompt = models.TextField()
    provider = models.CharField(max_length=64)
    model = models.CharField(max_length=200, blank=True)
    tools = models.JSONField(default=list, blank=True)
    options = models.JSONField(default=dict, blank=True)  # max_iterations, script, on_deny, system
    request_payload = models.JSONField(null=True, blank=True)  # what a queued run is rehydrated from
    suspended_state = models.JSONField(null=True, blank=True)  # the loop state awaiting approval

    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    claimed_by = models.CharField(max_length=200, blank=True)  # "worker:host:pid", "interactive:host:pid", ...
    lease_expires = models.DateTimeField(null=True, blank=True)
    attempts = models.PositiveIntegerField(default=0)  # requeues so far (retries, reaps); bounded by MAX_ATTEMPTS
    pending_effect = models.JSONField(null=True, blank=True)  # the non-idempotent call in flight, if any

    iterations = models.PositiveIntegerField(default=0)
    prompt_tokens = models.PositiveIntegerField(default=0)
    completion_tokens = models.PositiveIntegerField(default=0)
    final_text = models.TextField(blank=True)
    error_class = models.CharField(max_length=200, blank=True)
    error_message = models.TextField(blank=True)

    cancel_requested_at = models.DateTimeField(null=True, blank=True)
    cancelled_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # who cancelled, by name: the user's username, or an operator's (``agent_cancel --by``)
    cancelled_by_name = models.CharField(max_length=150, blank=True)
    cancel_source = models.CharField(max_length=16, choices=CancelSource.choices, blank=True)
    cancel_reason = models.TextField(blank=True)
    stopped_at = models.DateTimeField(null=True, blank=True)
    cancel_detail = models.JSONField(null=True, blank=True)  # a limit's cancel: the limit and the measured value

    # Limits (nrllm_agents.limits): wall time excluding approval waits, and total token spend.
    deadline_seconds = models.PositiveIntegerField(null=True, blank=True)
    max_total_tokens = models.PositiveBigIntegerField(null=True, blank=True)
    deadline_at = models.DateTimeField(null=True, blank=True)  # created_at + deadline, pushed back by approval waits

    # Forks (nrllm_agents.forks): the run this one continues, and the last step it copied.
    parent = models.ForeignKey("self", null=True, blank=True, on_delete=models.SET_NULL, related_name="children")
    forked_from_sequence = models.PositiveIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            models.Index(fields=["status", "created_at"], name="agentrun_status_created"),
            models.Index(fields=["owner", "-created_at"], name="agentrun_owner_created"),
            # The reaper's scans (running or cancelled, not stopped). No index names
            # lease_expires: it changes at every step, and renewals stay HOT updates.
            models.Index(fields=["status"], name="agentrun_unstopped", condition=models.Q(stopped_at__isnull=True)),
            models.Index(fields=["status", "deadline_at"], name="agentrun_status_deadline"),
        ]
        permissions = [
            ("cancel_agentrun", "Can cancel agent runs"),
            ("approve_agentrun", "Can approve or deny agent runs' gated tool calls"),
        ]

    def __str__(self) -> str:
        return f"{self.id} ({self.status})"

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    @property
    def is_terminal(self) -> bool:
        return self.status in TERMINAL


class AgentRunEvent(models.Model):
    """One recorded step of a run. Append-only; ``(run, sequence)`` is unique."""

    run = models.ForeignKey(AgentRun, on_delete=models.CASCADE, related_name="events")
    sequence = models.PositiveIntegerField()
    kind = models.CharField(max_length=16)
    round = models.PositiveIntegerField(default=0)
    duration_ms = models.FloatField(null=True, blank=True)
    payload = models.JSONField(default=dict)
    created_at = models.DateTimeField(default=timezone.now)  # set by the recorder, shared with observers

    class Meta:
        ordering = ["run", "sequence"]
        constraints = [models.UniqueConstraint(fields=["run", "sequence"], name="agentrunevent_run_sequence")]

    def __str__(self) -> str:
        return f"{self.run_id}#{self.sequence} {self.kind}"


class Note(models.Model):
    """A note written by an agent through the approval-gated ``write_note`` tool."""

    run = models.ForeignKey(AgentRun, null=True, blank=True, on_delete=models.SET_NULL, related_name="notes")
    title = models.CharField(max_length=200)
    body = models.TextField()
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.title


class ReaperPass(models.Model):
    """What one (non-dry) pass of the reaper did; the latest ones, for the operations page."""

    KEEP = 100  # older passes are pruned

    started_at = models.DateTimeField()
    finished_at = models.DateTimeField()
    requeued = models.PositiveIntegerField(default=0)
    dead_lettered = models.PositiveIntegerField(default=0)
    acknowledged = models.PositiveIntegerField(default=0)
    skipped = models.PositiveIntegerField(default=0)
    summary = models.TextField(blank=True)

    class Meta:
        ordering = ["-finished_at"]
        get_latest_by = "finished_at"

    def __str__(self) -> str:
        return f"reaper pass at {self.finished_at:%Y-%m-%d %H:%M:%S}: {self.summary}"

    @classmethod
    def record(cls, report: Any, started_at: datetime) -> ReaperPass:
        """Store a ``ReapReport`` and drop passes beyond the newest ``KEEP``."""
        row = cls.objects.create(
            started_at=started_at,
            finished_at=timezone.now(),
            requeued=len(report.requeued),
            dead_lettered=sum(report.dead_lettered.values()),
            acknowledged=report.acknowledged,
            skipped=report.skipped,
            summary=report.summary(),
        )
        stale = cls.objects.order_by("-finished_at").values_list("pk", flat=True)[cls.KEEP : cls.KEEP + 1000]
        cls.objects.filter(pk__in=list(stale)).delete()
        return row
