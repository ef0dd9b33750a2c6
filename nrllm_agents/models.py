"""Runs, their append-only step stream, and notes written by the ``write_note`` tool.

Only ``nrllm_agents.store`` writes ``AgentRun.status``.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models
from django.db.models.functions import Coalesce
from django.utils import timezone


class RunStatus(models.TextChoices):
    """Where a run is in its lifecycle."""

    QUEUED = "queued"  # stored, waiting for a worker to claim it
    RUNNING = "running"  # a segment is executing it
    WAITING_FOR_APPROVAL = "waiting_for_approval"  # suspended until a human decides
    WAITING_FOR_CHILDREN = "waiting_for_children"  # suspended until its sub-agent runs end (runtime.trees)
    COMPLETED = "completed"  # ended by the segment (answer, cap or denial)
    FAILED = "failed"  # ended by an error
    CANCELLED = "cancelled"  # ended by an operator


TERMINAL = frozenset({RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED})
ACTIVE = frozenset(
    {RunStatus.QUEUED, RunStatus.RUNNING, RunStatus.WAITING_FOR_APPROVAL, RunStatus.WAITING_FOR_CHILDREN}
)
QUIESCENT = ACTIVE - {RunStatus.RUNNING}  # active, but no segment executes it


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
    COST_EXCEEDED = "cost_exceeded"  # its cost limit (money) was spent; cancelled by the system
    ENQUEUE_FAILED = "enqueue_failed"  # the queue could not take the job
    INVALID_REQUEST = "invalid_request"  # the stored request could not be rehydrated
    RETRIES_EXHAUSTED = "retries_exhausted"  # transient failures or lost workers used up the requeue budget
    NOT_RETRYABLE = "not_retryable"  # a permanent failure, or a lost worker during a non-idempotent tool
    INTERNAL_ERROR = "internal_error"  # an unexpected error in the runtime
    # the run's provider or tools cannot be built as configured (a connection's key no configured
    # key opens, a kind not installed, a tool gone): not retried, fixed by an operator
    CONFIGURATION_FAILED = "configuration_failed"
    INTERRUPTED_BY_MESSAGE = "interrupted_by_message"  # a new message of its thread interrupted it (threads.py)
    BUDGET_EXHAUSTED = "budget_exhausted"  # a shared budget (Budget: user, group, agent, everyone) ran out


class CancelSource(models.TextChoices):
    """Where a cancel came from."""

    ADMIN = "admin", "admin"  # the Django admin
    CLI = "cli", "CLI"  # manage.py agent_cancel (or Ctrl-C in agent_run)
    API = "api", "API"  # the REST API
    PLAYGROUND = "playground", "playground"  # the playground's Cancel button
    SYSTEM = "system", "system (a limit)"  # the application itself
    CODE = "code", "code"  # the host's own code, through the Python API (nrllm_agents.cancel)
    AG_UI = "ag-ui", "AG-UI"  # an AG-UI client's Stop (nrllm_agents.ag_ui)


class MultitaskStrategy(models.TextChoices):
    """What a message does when a run of its thread is still queued, running or waiting."""

    REJECT = "reject"  # refuse the message (409); nothing is created
    ENQUEUE = "enqueue"  # its run waits for the runs before it, in arrival order
    INTERRUPT = "interrupt"  # cancel the run in flight; its partial turn stays in the transcript
    ROLLBACK = "rollback"  # cancel the run in flight; its turn leaves the transcript (the run stays)


class Thread(models.Model):
    """A conversation: runs that each continue the transcript the runs before them left."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="agent_threads"
    )
    title = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    last_activity_at = models.DateTimeField(default=timezone.now)  # the last message posted
    # The Agent Protocol (nrllm_agents.agent_protocol): the client's own metadata, and whether a
    # client deleted the thread there (it then reads 404 through the protocol; its runs stay).
    metadata = models.JSONField(default=dict, blank=True)
    hidden_from_protocol = models.BooleanField(default=False)

    class Meta:
        ordering = ["-last_activity_at"]
        indexes = [
            models.Index(fields=["owner", "-last_activity_at"], name="thread_owner_activity"),
            models.Index(fields=["last_activity_at"], name="thread_activity"),
        ]

    def __str__(self) -> str:
        return self.title or str(self.id)


TIMES_IN_ORDER = models.CheckConstraint(
    condition=(
        (models.Q(started_at__isnull=True) | models.Q(started_at__gte=models.F("created_at")))
        & (models.Q(stopped_at__isnull=True) | models.Q(stopped_at__gte=Coalesce("started_at", "created_at")))
        & (
            models.Q(finished_at__isnull=True)
            | models.Q(finished_at__gte=Coalesce("stopped_at", "started_at", "created_at"))
        )
    ),
    name="agentrun_times_in_order",
    violation_error_message="a run's times must be in order: created <= started <= stopped <= finished",
)
"""``created_at <= started_at <= stopped_at <= finished_at`` on every run, whichever are set. The
store's writes clamp each stamp to the ones before it (``store.journal.stop_stamp``), so clocks
of different hosts a few milliseconds apart never make a transition fail."""


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
    connection = models.CharField(max_length=100, blank=True)  # the Connection's name, when it ran through one
    tools = models.JSONField(default=list, blank=True)
    options = models.JSONField(default=dict, blank=True)  # max_iterations, script, on_deny, system
    request_payload = models.JSONField(null=True, blank=True)  # what a queued run is rehydrated from
    suspended_state = models.JSONField(null=True, blank=True)  # the loop state awaiting approval

    # Not auto_now_add: a run that executes from birth (``store.begin``) is created and started
    # at one clock reading, so ``created_at <= started_at`` holds (``TIMES_IN_ORDER``).
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    claimed_by = models.CharField(max_length=200, blank=True)  # "worker:host:pid", "interactive:host:pid", ...
    lease_expires = models.DateTimeField(null=True, blank=True)
    attempts = models.PositiveIntegerField(default=0)  # requeues so far (retries, reaps); bounded by MAX_ATTEMPTS
    pending_effect = models.JSONField(null=True, blank=True)  # the non-idempotent call in flight, if any

    iterations = models.PositiveIntegerField(default=0)
    prompt_tokens = models.PositiveIntegerField(default=0)
    completion_tokens = models.PositiveIntegerField(default=0)
    # Money (nrllm_agents.money.pricing): the sum of its model calls' costs at the prices in force when
    # they ran; null while no call was priced. Estimated: an interrupted call's tokens were estimated.
    cost = models.DecimalField(max_digits=24, decimal_places=12, null=True, blank=True)
    cost_estimated = models.BooleanField(default=False)
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

    # Limits (nrllm_agents.runtime.limits): wall time excluding approval waits, and total token spend.
    deadline_seconds = models.PositiveIntegerField(null=True, blank=True)
    max_total_tokens = models.PositiveBigIntegerField(null=True, blank=True)
    max_cost = models.DecimalField(max_digits=24, decimal_places=12, null=True, blank=True)  # in CURRENCY
    deadline_at = models.DateTimeField(null=True, blank=True)  # created_at + deadline, pushed back by approval waits

    # Forks (nrllm_agents.runtime.forks): the run this one continues, and the last step it copied.
    parent = models.ForeignKey("self", null=True, blank=True, on_delete=models.SET_NULL, related_name="children")
    forked_from_sequence = models.PositiveIntegerField(null=True, blank=True)

    # Trees (nrllm_agents.runtime.trees): the run whose sub-agent call started this one, that call
    # (its id, and the sequence of the model step that made it), the tree's root and the depth.
    tree_parent = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.CASCADE, related_name="tree_children"
    )
    tree_root = models.ForeignKey("self", null=True, blank=True, on_delete=models.CASCADE, related_name="+")
    tree_depth = models.PositiveIntegerField(default=0)
    tree_call_id = models.CharField(max_length=200, blank=True)
    tree_call_sequence = models.PositiveIntegerField(null=True, blank=True)

    # Live push (push.py): how many processes watch this run now. The boundary returns it, so a
    # run nobody watches announces none of its steps (migration 0010_targeted_push).
    watchers = models.IntegerField(default=0, db_default=0, editable=False)
    # Agents (nrllm_agents.catalog.agents): the exact version it was started from, and a copy of that
    # version's definition, which no later edit (or deletion) of the agent changes.
    agent_version = models.ForeignKey(
        "AgentVersion", null=True, blank=True, on_delete=models.SET_NULL, related_name="runs"
    )
    agent_snapshot = models.JSONField(null=True, blank=True)  # {"name", "version", "definition"}
    # Threads (nrllm_agents.runtime.threads): the conversation, the message's place in it, how it was
    # posted, and whether a later message rolled its turn out of the transcript.
    thread = models.ForeignKey(Thread, null=True, blank=True, on_delete=models.CASCADE, related_name="runs")
    thread_position = models.PositiveIntegerField(null=True, blank=True)
    multitask_strategy = models.CharField(max_length=16, choices=MultitaskStrategy.choices, blank=True)
    rolled_back = models.BooleanField(default=False)
    # Traces (nrllm_agents.observability.tracing): the W3C trace context the run continues
    # (``{"traceparent", "tracestate"}``), so every segment, in whichever process, joins one trace.
    trace_context = models.JSONField(null=True, blank=True)
    # The Agent Protocol (nrllm_agents.agent_protocol): the client's metadata, and whether a client
    # deleted the run there (404 through the protocol; it stays in the API, the admin and the audit).
    metadata = models.JSONField(default=dict, blank=True)
    hidden_from_protocol = models.BooleanField(default=False)
    # Retention (nrllm_agents.store.retention): when the run's content was purged past
    # ``RETENTION["content_days"]``; the skeleton (status, times, who, spend, links) stays.
    purged_at = models.DateTimeField(null=True, blank=True, editable=False)

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            models.Index(fields=["status", "created_at"], name="agentrun_status_created"),
            models.Index(fields=["owner", "-created_at"], name="agentrun_owner_created"),
            # The reaper's scans (running or cancelled, not stopped). No index names
            # lease_expires: it changes at every step, and renewals stay HOT updates.
            models.Index(fields=["status"], name="agentrun_unstopped", condition=models.Q(stopped_at__isnull=True)),
            models.Index(fields=["status", "deadline_at"], name="agentrun_status_deadline"),
            models.Index(fields=["tree_root"], name="agentrun_tree_root", condition=models.Q(tree_root__isnull=False)),
            # Retention (store.retention): the oldest runs still holding content, and the oldest
            # runs at all; a purged run leaves the first, so no batch walks over purged rows.
            models.Index(
                fields=["finished_at"],
                name="agentrun_unpurged_finished",
                condition=models.Q(purged_at__isnull=True, finished_at__isnull=False),
            ),
            models.Index(fields=["finished_at"], name="agentrun_finished"),
            # The lists' orderings at any size (issue 45): newest first with the id as tiebreak, the
            # admin's and the API's (keyset) order, alone and under the filters an index can lead.
            # None names a column a step boundary writes, so renewals stay HOT updates.
            models.Index(fields=["-created_at", "-id"], name="agentrun_created"),
            models.Index(fields=["provider", "-created_at"], name="agentrun_provider_created"),
            models.Index(fields=["termination_reason", "-created_at"], name="agentrun_reason_created"),
            models.Index(
                fields=["cancel_source", "-created_at"],
                name="agentrun_cancel_source_created",
                condition=~models.Q(cancel_source=""),
            ),
        ]
        constraints = [
            models.UniqueConstraint(fields=["thread", "thread_position"], name="agentrun_thread_position"),
            # one child per sub-agent call: a parent that spawns again (after a crash) finds it
            models.UniqueConstraint(
                fields=["tree_parent", "tree_call_id"],
                name="agentrun_tree_call",
                condition=models.Q(tree_parent__isnull=False),
            ),
            TIMES_IN_ORDER,
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

    # No index of its own: the unique (run, sequence) index serves every lookup by run, and one
    # index fewer is one write fewer at every step boundary (migration 0010_targeted_push).
    run = models.ForeignKey(AgentRun, on_delete=models.CASCADE, related_name="events", db_index=False)
    sequence = models.PositiveIntegerField()
    kind = models.CharField(max_length=16)
    round = models.PositiveIntegerField(default=0)
    duration_ms = models.FloatField(null=True, blank=True)
    payload = models.JSONField(default=dict)
    created_at = models.DateTimeField(default=timezone.now)  # set by the recorder, shared with observers
    purged_at = models.DateTimeField(null=True, blank=True)  # its content purged (store.retention)

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


class RateCounter(models.Model):
    """Attempts of one caller in one window of one rate limit (``admission.rates``).

    Written only by one atomic upsert (``INSERT … ON CONFLICT DO UPDATE … WHERE count <
    allowed``); rows of finished windows are pruned by the first attempt of the next window.
    """

    scope = models.CharField(max_length=64)  # the action and its period, e.g. "run_create/60"
    ident = models.CharField(max_length=128)  # "user:<pk>" or "addr:<ip>"
    period = models.BigIntegerField()  # the window's number: unix time // its length
    count = models.PositiveIntegerField(default=0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["scope", "ident", "period"], name="nrllm_rate_window")]
        indexes = [models.Index(fields=["scope", "period"], name="nrllm_rate_prune")]

    def __str__(self) -> str:
        return f"{self.scope} {self.ident} #{self.period}: {self.count}"


class ConnectionKind(models.TextChoices):
    """Which wire protocol a connection speaks (each has its provider class)."""

    OPENAI = "openai"  # chat completions: OpenAI and compatible servers (Ollama, vLLM, ...)
    ANTHROPIC = "anthropic"  # Anthropic's Messages API
    GEMINI = "gemini"  # Google's Gemini API


class Named(models.Model):
    """What connections and agents share: a unique slug name, when they changed, and who may
    use them in a run (``access.policy.may_use``): nobody named, users or groups, means every
    signed-in user; once one is named, only those (and staff who may change them)."""

    name = models.SlugField(max_length=100, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    allowed_users = models.ManyToManyField(
        settings.AUTH_USER_MODEL,
        blank=True,
        related_name="+",
        help_text="Who may use it in a run. Leave both lists empty to let every signed-in user use it.",
    )
    allowed_groups = models.ManyToManyField(
        "auth.Group", blank=True, related_name="+", help_text="Members of these groups may use it too."
    )

    class Meta:
        abstract = True
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Connection(Named):
    """A model server to run through: its protocol, address, default model and API key.

    The key is stored encrypted (``nrllm_agents.crypto.vault``) and is write-only: ``set_key`` takes
    it, ``api_key()`` decrypts it for the provider about to call the server, and nothing
    else (``str``, ``repr``, forms, the API, the commands) ever shows it. The URL's credentials
    (``user:password@``) are kept the same way: ``set_url`` stores the URL without them in
    ``base_url`` and them encrypted, ``url()`` puts them back for the provider.
    """

    kind = models.CharField(max_length=16, choices=ConnectionKind.choices)
    base_url = models.URLField(max_length=500)  # where the key goes (no user:password@): never from the environment
    default_model = models.CharField(max_length=200, blank=True)
    encrypted_key = models.TextField(blank=True, editable=False)  # a Fernet token; blank: no key
    encrypted_userinfo = models.TextField(blank=True, editable=False)  # base_url's user:password, a Fernet token

    def __repr__(self) -> str:
        return f"<Connection {self.name} ({self.kind})>"

    def clean(self) -> None:
        if not self.default_model.isprintable():  # it is printed by commands and pages
            raise ValidationError({"default_model": "printable characters only"})

    @property
    def has_key(self) -> bool:
        return bool(self.encrypted_key)

    def set_key(self, key: str | None) -> None:
        """Encrypt and keep ``key`` (``None`` or blank: no key). Call ``save()`` afterwards."""
        from .crypto.vault import encrypt

        self.encrypted_key = encrypt(key) if key else ""

    def api_key(self) -> str | None:
        """The decrypted key, or ``None``; raises ``vault.VaultError`` when it cannot be opened."""
        from .crypto.vault import decrypt

        return decrypt(self.encrypted_key) if self.encrypted_key else None

    @property
    def has_userinfo(self) -> bool:
        return bool(self.encrypted_userinfo)

    def set_url(self, url: str) -> None:
        """Keep ``url``: without its credentials (``user:password@``) in ``base_url``, and them
        encrypted. Call ``save()`` afterwards."""
        from .crypto.vault import encrypt

        bare, userinfo = split_userinfo(url)
        self.base_url, self.encrypted_userinfo = bare, encrypt(userinfo) if userinfo else ""

    def url(self) -> str:
        """The whole URL, credentials included, for the provider about to call the server;
        raises ``vault.VaultError`` when they cannot be opened."""
        from .crypto.vault import decrypt

        if not self.encrypted_userinfo:
            return self.base_url
        return with_userinfo(self.base_url, decrypt(self.encrypted_userinfo))


def split_userinfo(url: str) -> tuple[str, str]:
    """``url`` without its ``user:password@``, and that userinfo (``""`` when there is none)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return url, ""
    userinfo, at, host = parts.netloc.rpartition("@")
    if not at:
        return url, ""
    return urlunsplit(parts._replace(netloc=host)), userinfo


def with_userinfo(url: str, userinfo: str) -> str:
    """``url`` with ``userinfo`` (``user:password``) put back before its host."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(netloc=f"{userinfo}@{parts.netloc}"))


class Price(models.Model):
    """What a model costs, per million tokens, through a connection or a provider.

    The price in force when a model call runs is the one its cost is recorded at
    (``nrllm_agents.money.pricing``); changing a price later changes no recorded cost.
    """

    connection = models.ForeignKey(Connection, null=True, blank=True, on_delete=models.CASCADE, related_name="prices")
    provider = models.CharField(max_length=64, blank=True)  # for runs of an environment-configured provider
    model = models.CharField(max_length=200)
    input_per_million = models.DecimalField(max_digits=18, decimal_places=6)
    output_per_million = models.DecimalField(max_digits=18, decimal_places=6)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["connection__name", "provider", "model"]
        constraints = [
            models.CheckConstraint(
                condition=(models.Q(connection__isnull=True) & ~models.Q(provider=""))
                | (models.Q(connection__isnull=False) & models.Q(provider="")),
                name="price_connection_xor_provider",
                violation_error_message="A price is for a connection or for a provider: set exactly one of them.",
            ),
            models.UniqueConstraint(
                fields=["connection", "model"],
                condition=models.Q(connection__isnull=False),
                name="price_connection_model",
            ),
            models.UniqueConstraint(
                fields=["provider", "model"], condition=models.Q(connection__isnull=True), name="price_provider_model"
            ),
        ]

    def __str__(self) -> str:
        where = f"connection {self.connection}" if self.connection_id else f"provider {self.provider}"
        return f"{self.model} via {where}: {self.input_per_million} in / {self.output_per_million} out per 1M tokens"


class Agent(Named):
    """A named agent: instructions, a connection or provider and model, tools and limits.

    Its definition lives in versions: editing an agent adds a version, never changes one, so a
    run records exactly what it was started with (``AgentRun.agent_version`` and its snapshot).
    """

    description = models.TextField(blank=True)

    def latest(self) -> AgentVersion | None:
        return self.versions.order_by("-version").first()


class AgentVersion(models.Model):
    """One immutable version of an agent's definition (the run request fields it sets)."""

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="versions")
    version = models.PositiveIntegerField()
    definition = models.JSONField(default=dict)
    created_at = models.DateTimeField(auto_now_add=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        ordering = ["agent", "-version"]
        constraints = [models.UniqueConstraint(fields=["agent", "version"], name="agentversion_agent_version")]

    def __str__(self) -> str:
        return f"{self.agent.name} v{self.version}"

    def snapshot(self) -> dict[str, Any]:
        """What a run records of the version it started from."""
        return {"name": self.agent.name, "version": self.version, "definition": self.definition}


class BudgetScope(models.TextChoices):
    """Whose runs a budget covers."""

    USER = "user"  # the runs a user owns
    GROUP = "group"  # the runs of every member of an auth Group (a team)
    AGENT = "agent"  # the runs started from a saved agent (any version)
    EVERYONE = "everyone"  # every run


class BudgetWindow(models.TextChoices):
    """How long a budget's spend counts before it starts again at zero, on calendar boundaries
    in ``TIME_ZONE``."""

    DAY = "day"  # from local midnight
    MONTH = "month"  # from the first of the month, local midnight
    TOTAL = "total"  # never resets


class Budget(models.Model):
    """A ceiling on what many runs spend together (``nrllm_agents.store.budgets``).

    ``spent_*`` and ``runs`` count since ``period_start`` (the start of the current window: a
    window that has passed counts as zero, and the next write moves ``period_start``);
    ``reserved_*`` is the worst case of the model calls in flight (``BudgetHold``). Only
    ``store.budgets`` writes the counters.
    """

    scope = models.CharField(max_length=16, choices=BudgetScope.choices)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    group = models.ForeignKey("auth.Group", null=True, blank=True, on_delete=models.CASCADE, related_name="+")
    agent = models.ForeignKey("Agent", null=True, blank=True, on_delete=models.CASCADE, related_name="budgets")
    window = models.CharField(max_length=8, choices=BudgetWindow.choices, db_column="time_window")
    max_cost = models.DecimalField(max_digits=24, decimal_places=12, null=True, blank=True)  # in CURRENCY
    max_tokens = models.PositiveBigIntegerField(null=True, blank=True)
    max_runs = models.PositiveIntegerField(null=True, blank=True)
    spent_cost = models.DecimalField(max_digits=24, decimal_places=12, default=0, editable=False)
    spent_tokens = models.BigIntegerField(default=0, editable=False)
    runs = models.PositiveIntegerField(default=0, editable=False)
    reserved_cost = models.DecimalField(max_digits=24, decimal_places=12, default=0, editable=False)
    reserved_tokens = models.BigIntegerField(default=0, editable=False)
    period_start = models.DateTimeField(default=timezone.now, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["scope", "window", "id"]
        constraints = [
            models.CheckConstraint(
                condition=(
                    models.Q(scope="user", user__isnull=False, group__isnull=True, agent__isnull=True)
                    | models.Q(scope="group", user__isnull=True, group__isnull=False, agent__isnull=True)
                    | models.Q(scope="agent", user__isnull=True, group__isnull=True, agent__isnull=False)
                    | models.Q(scope="everyone", user__isnull=True, group__isnull=True, agent__isnull=True)
                ),
                name="budget_scope_subject",
            ),
            models.UniqueConstraint(fields=["user", "window"], name="budget_user_window"),
            models.UniqueConstraint(fields=["group", "window"], name="budget_group_window"),
            models.UniqueConstraint(fields=["agent", "window"], name="budget_agent_window"),
            models.UniqueConstraint(
                fields=["window"], condition=models.Q(scope="everyone"), name="budget_everyone_window"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.subject} per {self.window}" if self.window != BudgetWindow.TOTAL else f"{self.subject} in total"

    @property
    def subject(self) -> str:
        """Whose budget, in words: ``user alice``, ``group research``, ``agent triage``, ``everyone``."""
        named = {"user": self.user, "group": self.group, "agent": self.agent}.get(self.scope)
        if named is None:
            return "everyone"
        name = named.get_username() if hasattr(named, "get_username") else getattr(named, "name", "")
        return f"{self.scope} {name}"


class BudgetHold(models.Model):
    """The worst-case cost of one model call in flight, reserved against one budget until the
    call ends (its actual cost then replaces it) or the reaper finds its segment dead."""

    budget = models.ForeignKey(Budget, on_delete=models.CASCADE, related_name="holds")
    run = models.ForeignKey(AgentRun, on_delete=models.CASCADE, related_name="+", db_index=True)
    owner = models.CharField(max_length=200)  # the segment that holds it (AgentRun.claimed_by)
    cost = models.DecimalField(max_digits=24, decimal_places=12, default=0)
    tokens = models.BigIntegerField(default=0)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        indexes = [models.Index(fields=["budget"], name="budgethold_budget")]


class ClientRun(models.Model):
    """A run id an AG-UI client chose (``RunAgentInput.runId``), per user: the run it started
    or resumed, and a Stop that arrived before it (``ag_ui.claims``). Several client ids may
    name one run (a resume is a new AG-UI run of the same run of ours)."""

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    client_run_id = models.CharField(max_length=200)
    run = models.ForeignKey(AgentRun, null=True, blank=True, on_delete=models.CASCADE, related_name="client_runs")
    cancel_requested_at = models.DateTimeField(null=True, blank=True)  # a Stop, maybe before the run existed
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["owner", "client_run_id"], name="clientrun_owner_id")]
