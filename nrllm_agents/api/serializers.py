"""Request validation and the documented response shapes of the REST API.

Input serializers validate what a caller sends (cancel, approve, bulk cancel, list and event
query parameters) strictly, as the schema states it. A run's creation request is checked for
shape by ``CreateRunSerializer``, then by ``RunRequest.from_mapping``, the one validator every
surface shares.

Output serializers describe the JSON that ``nrllm_agents.vocabulary.presenters`` builds; they render
through the presenters, never beside them, and the schemathesis test proves the served schema
and the responses agree.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django.core.validators import MaxValueValidator
from rest_framework import serializers

from ..conf import app_settings
from ..domain import StepKind
from ..domain.providers.scripted import MAX_DELAY_SECONDS, MAX_USAGE_TOKENS
from ..models import AgentRun, CancelSource, MultitaskStrategy, RunStatus, TerminationReason
from ..runtime.agent_runtime import CancelOutcome, Outcome
from ..store import MAX_REASON_CHARS, MAX_SEQUENCE
from ..vocabulary.presenters import run_status_dict
from ..vocabulary.run_request import MAX_PROMPT_CHARS
from .fields import (
    StrictBooleanField,
    StrictCharField,
    StrictDateTimeField,
    StrictFloatField,
    StrictIntegerField,
    StrictUUIDField,
)

MAX_BULK_IDS = 1000  # beyond this, select by status: an IN list of ids does not scale
MAX_EVENTS_PAGE = 1000
DEFAULT_EVENTS_PAGE = 100


def run_representation(run: AgentRun, *, expand_request: bool = True) -> dict[str, Any]:
    """A run as the API shows it: the shared status payload, its owner, its request and its forks.

    ``children`` lists the forks prefetched as ``visible_children`` (those the caller may see).

    Without ``expand_request`` (lists, unless ``?expand=request``) the request leaves out its
    bulky parts, the script and the system prompt.
    """
    options = run.options or {}
    request = {
        "prompt": run.prompt,
        "provider": run.provider,
        "model": run.model,
        "tools": list(run.tools or []),
        "max_iterations": options.get("max_iterations"),
        "on_deny": options.get("on_deny"),
    }
    if expand_request:
        request.update(script=options.get("script"), system=options.get("system"))
    return {
        **run_status_dict(run),
        "children": [str(child.pk) for child in getattr(run, "visible_children", ())],
        "owner": run.owner.get_username() if run.owner_id else None,
        "request": request,
    }


# --- input ----------------------------------------------------------------------------------


class RunFilterSerializer(serializers.Serializer):
    """Filters of ``GET /api/runs/``; repeat ``status`` or ``termination_reason`` to match any."""

    status = serializers.ListField(
        child=serializers.ChoiceField(RunStatus.choices),
        required=False,
        help_text="Only runs in one of these statuses.",
    )
    termination_reason = serializers.ListField(
        child=serializers.ChoiceField(TerminationReason.choices),
        required=False,
        help_text="Only runs that ended for one of these reasons.",
    )
    created_after = StrictDateTimeField(required=False, help_text="Only runs created at or after this time.")
    created_before = StrictDateTimeField(required=False, help_text="Only runs created before this time.")
    expand = serializers.ChoiceField(
        ["request"], required=False, help_text="`request`: include each run's script and system prompt."
    )


class EventsQuerySerializer(serializers.Serializer):
    """Paging of a run's step stream by sequence."""

    after = serializers.IntegerField(
        required=False,
        default=-1,
        min_value=-1,
        max_value=MAX_SEQUENCE,
        help_text="Return steps with a sequence greater than this (-1: from the start).",
    )
    limit = serializers.IntegerField(
        required=False,
        default=DEFAULT_EVENTS_PAGE,
        min_value=1,
        max_value=MAX_EVENTS_PAGE,
        help_text="At most this many steps.",
    )


class ClosedSerializer(serializers.Serializer):
    """A request body that names only known fields: an unknown one is a 400, as on create."""

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        data = self.initial_data
        unknown = sorted(map(str, set(data) - set(self.fields))) if isinstance(data, dict) else []
        if unknown:
            raise serializers.ValidationError({"non_field_errors": [f"unknown fields: {', '.join(unknown)}"]})
        return super().validate(attrs)


def reason_field(help_text: str) -> StrictCharField:
    """A cancel reason, as the store takes it (``store.MAX_REASON_CHARS``). Recorded as written:
    trimming would also make an over-long reason of trailing spaces valid."""
    return StrictCharField(
        required=False,
        allow_blank=True,
        max_length=MAX_REASON_CHARS,
        default="",
        trim_whitespace=False,
        help_text=help_text,
    )


class CancelRequestSerializer(ClosedSerializer):
    reason = reason_field("Why the run is cancelled; recorded on the run.")


class ApproveRequestSerializer(ClosedSerializer):
    approved = StrictBooleanField(help_text="true runs the pending calls; false denies them.")
    queued = StrictBooleanField(
        required=False, default=False, help_text="Hand the resumed run to a worker instead of running it now."
    )


class BulkCancelRequestSerializer(ClosedSerializer):
    """Either ``ids``, or ``status`` (with an optional ``created_before``); never both."""

    ids = serializers.ListField(
        child=StrictUUIDField(),
        required=False,
        allow_empty=False,
        max_length=MAX_BULK_IDS,
        help_text="Cancel these runs.",
    )
    status = serializers.ListField(
        child=serializers.ChoiceField(RunStatus.choices),
        required=False,
        allow_empty=False,
        help_text="Cancel the runs in these statuses.",
    )
    created_before = StrictDateTimeField(required=False, help_text="With status: only runs created before this time.")
    dry_run = StrictBooleanField(required=False, default=False, help_text="Count what would happen; change nothing.")
    reason = reason_field("Why; recorded on each run cancelled.")

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        attrs = super().validate(attrs)
        if ("ids" in attrs) == ("status" in attrs):
            raise serializers.ValidationError("give either ids or status")
        if "ids" in attrs and "created_before" in attrs:
            raise serializers.ValidationError({"created_before": ["only with status"]})
        return attrs


class _TurnUsageSerializer(serializers.Serializer):
    prompt_tokens = StrictIntegerField(required=False, min_value=0, max_value=MAX_USAGE_TOKENS)
    completion_tokens = StrictIntegerField(required=False, min_value=0, max_value=MAX_USAGE_TOKENS)


class _ScriptToolCallSerializer(serializers.Serializer):
    name = StrictCharField()
    arguments = serializers.DictField(required=False)


class ScriptTurnSerializer(serializers.Serializer):
    """One scripted model turn: exactly one of ``content`` or ``tool_calls``."""

    content = StrictCharField(required=False, allow_blank=True, trim_whitespace=False)
    tool_calls = _ScriptToolCallSerializer(many=True, required=False)
    delay = StrictFloatField(
        required=False, min_value=0, max_value=MAX_DELAY_SECONDS, help_text="Simulated model latency in seconds."
    )
    usage = _TurnUsageSerializer(required=False)
    expect = serializers.ListField(
        child=serializers.DictField(),
        required=False,
        help_text="The transcript this turn must receive: one object of required "
        "keys per message; any other transcript fails the call.",
    )


class CreateRunSerializer(serializers.Serializer):
    """The shape of ``POST /api/runs/``: types, choices and bounds, exactly as the schema states them.

    The view checks this shape first (omit a field for its default; ``null`` is not a value), then
    ``RunRequest.from_mapping`` applies the rules every surface shares (a script only for the
    scripted provider, a model for openai, no unknown fields, a prompt that is not blank).
    """

    prompt = StrictCharField(max_length=MAX_PROMPT_CHARS, trim_whitespace=False)
    provider = serializers.ChoiceField(
        choices=[], required=False, help_text="Model provider; default from settings (scripted)."
    )
    model = StrictCharField(
        required=False,
        allow_blank=True,
        max_length=200,
        trim_whitespace=False,
        help_text="Model name; required by the openai provider.",
    )
    tools = serializers.ListField(
        child=serializers.ChoiceField(choices=[]),
        required=False,
        help_text="Tools the agent may call; default from settings.",
    )
    max_iterations = StrictIntegerField(required=False, min_value=1)
    script = ScriptTurnSerializer(
        many=True,
        required=False,
        allow_empty=False,
        help_text="Turns for the scripted provider (offline, deterministic).",
    )
    system = StrictCharField(required=False, allow_blank=True, max_length=MAX_PROMPT_CHARS, trim_whitespace=False)
    on_deny = serializers.ChoiceField(
        ["continue", "stop"], required=False, help_text="After a denied approval: let the model go on, or end the run."
    )
    mode = serializers.ChoiceField(
        ["queued", "sync"],
        required=False,
        default="queued",
        help_text="queued (default): a worker runs it, answer 202. sync: run it now, answer 201 with its outcome.",
    )
    deadline_seconds = StrictIntegerField(
        required=False,
        min_value=1,
        help_text="Cancel the run (deadline_exceeded) once it has taken this many "
        "seconds, not counting approval waits; default from settings.",
    )
    max_total_tokens = StrictIntegerField(
        required=False,
        min_value=1,
        help_text="Cancel the run (budget_exceeded) after the model call that "
        "takes its total spend above this; default from settings.",
    )
    max_cost = serializers.DecimalField(
        required=False,
        max_digits=24,
        decimal_places=12,
        min_value=Decimal("0.000000000001"),
        help_text="Cancel the run (cost_exceeded) after the model call that takes its cost above this "
        'amount (a decimal string such as "0.50", in the configured currency); default from settings.',
    )
    connection = StrictCharField(
        required=False,
        max_length=100,
        help_text="Run through this connection (its kind sets the provider, its default model the model).",
    )
    agent = StrictCharField(
        required=False,
        max_length=100,
        help_text="Start from this agent (see /api/agents/): its definition fills every field left out.",
    )
    agent_version = StrictIntegerField(
        required=False, min_value=1, help_text="With agent: this version of it (default: the latest)."
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # The choices and bounds are settings: read them when used, not at import.
        self.fields["provider"].choices = sorted(app_settings.PROVIDERS)
        self.fields["tools"].child.choices = sorted(app_settings.TOOLS)
        for name, setting in (
            ("max_iterations", "MAX_ITERATIONS_LIMIT"),
            ("deadline_seconds", "DEADLINE_SECONDS_LIMIT"),
            ("max_total_tokens", "MAX_TOTAL_TOKENS_LIMIT"),
        ):
            limit = int(getattr(app_settings, setting))
            self.fields[name].max_value = limit
            self.fields[name].validators.append(MaxValueValidator(limit))


class ForkRequestSerializer(CreateRunSerializer):
    """The shape of ``POST /api/runs/{id}/fork/``: the fork point, the mode, and what to override.

    Whatever is not overridden is copied from the parent run (prompt and system prompt always).
    """

    prompt = None  # type: ignore[assignment]
    system = None  # type: ignore[assignment]
    on_deny = None  # type: ignore[assignment]
    agent_version = None  # type: ignore[assignment]
    from_sequence = StrictIntegerField(
        required=False,
        min_value=0,
        max_value=MAX_SEQUENCE,
        help_text="Continue from this step (its sequence), included; default: the "
        "last step before the parent's `cancelled` step, else its last.",
    )


class CreateThreadSerializer(ClosedSerializer):
    """The shape of ``POST /api/threads/``."""

    title = StrictCharField(required=False, allow_blank=True, max_length=200, default="")


class MessageRequestSerializer(CreateRunSerializer):
    """The shape of ``POST /api/threads/{id}/messages/``: the message (``prompt``), what to do
    when a run of the thread is still active, and the fields of the run that answers it."""

    mode = None  # type: ignore[assignment]
    multitask_strategy = serializers.ChoiceField(
        MultitaskStrategy.choices,
        required=False,
        help_text="When a run of the thread is still queued, running or waiting: reject (409), "
        "enqueue (wait for it), interrupt (cancel it, keep its partial turn) or rollback "
        "(cancel it, drop its turn). Default from settings (enqueue).",
    )


# --- output ---------------------------------------------------------------------------------


class UsageSerializer(serializers.Serializer):
    prompt_tokens = serializers.IntegerField()
    completion_tokens = serializers.IntegerField()
    total_tokens = serializers.IntegerField()


class PendingCallSerializer(serializers.Serializer):
    id = serializers.CharField()
    name = serializers.CharField()
    arguments = serializers.DictField()


class LimitDetailSerializer(serializers.Serializer):
    limit = serializers.ChoiceField(
        ["deadline_seconds", "max_total_tokens", "max_cost"], help_text="The limit exceeded."
    )
    value = serializers.JSONField(help_text="The limit's value (a number; for max_cost a decimal string).")
    measured = serializers.JSONField(
        help_text="What was measured when it stopped the run (a number; for max_cost a decimal string)."
    )
    unit = serializers.CharField(help_text="s, tokens, or the currency (max_cost).")


class AgentRefSerializer(serializers.Serializer):
    name = serializers.CharField()
    version = serializers.IntegerField(help_text="Exactly this version (its definition is kept with the run).")


class CostSerializer(serializers.Serializer):
    amount = serializers.CharField(help_text="A decimal string, exact: the run's model calls at the prices in force.")
    currency = serializers.CharField()
    estimated = serializers.BooleanField(help_text="Part of it was priced from an interrupted call's estimated tokens.")


class LimitsSerializer(serializers.Serializer):
    deadline_seconds = serializers.IntegerField(allow_null=True, help_text="null: no deadline.")
    max_total_tokens = serializers.IntegerField(allow_null=True, help_text="null: no token budget.")
    max_cost = serializers.CharField(allow_null=True, help_text="A decimal string; null: no cost limit.")
    deadline_at = serializers.DateTimeField(
        allow_null=True, help_text="When the deadline passes (approval waits so far added back); null: no deadline."
    )


class ParentSerializer(serializers.Serializer):
    run_id = serializers.UUIDField(help_text="The run this one was forked from.")
    from_sequence = serializers.IntegerField(help_text="The parent's last step copied into this run.")


class CancelRecordSerializer(serializers.Serializer):
    requested_at = serializers.DateTimeField()
    by = serializers.CharField(allow_null=True, help_text="Username of who cancelled, if a user did.")
    source = serializers.ChoiceField(CancelSource.choices, allow_null=True)
    reason = serializers.CharField(allow_null=True)
    stopped_at = serializers.DateTimeField(
        allow_null=True, help_text="When execution stopped; null while an executing run reaches its next boundary."
    )
    limit = LimitDetailSerializer(allow_null=True, help_text="Set when a limit cancelled the run (source system).")


class RunRequestEchoSerializer(serializers.Serializer):
    prompt = serializers.CharField()
    provider = serializers.CharField()
    model = serializers.CharField(allow_blank=True)
    tools = serializers.ListField(child=serializers.CharField())
    max_iterations = serializers.IntegerField(allow_null=True)
    on_deny = serializers.CharField(allow_null=True)
    script = serializers.ListField(
        child=serializers.DictField(),
        allow_null=True,
        required=False,
        help_text="Left out of lists unless `expand=request`.",
    )
    system = serializers.CharField(
        allow_null=True, required=False, help_text="Left out of lists unless `expand=request`."
    )


class RunThreadSerializer(serializers.Serializer):
    thread_id = serializers.UUIDField(help_text="The thread this run answers a message of.")
    position = serializers.IntegerField(help_text="The message's place in its thread, from 0.")
    multitask_strategy = serializers.ChoiceField(MultitaskStrategy.choices, allow_null=True)
    rolled_back = serializers.BooleanField(help_text="A later message rolled this run's turn out of the transcript.")


class RunSerializer(serializers.Serializer):
    """A run: status, reason, request, timestamps, usage, pending approval and cancel record."""

    run_id = serializers.UUIDField()
    status = serializers.ChoiceField(RunStatus.choices)
    termination_reason = serializers.ChoiceField(TerminationReason.choices, allow_null=True)
    iterations = serializers.IntegerField()
    usage = UsageSerializer()
    cost = CostSerializer(allow_null=True, help_text="null: no price was in force for its model calls.")
    connection = serializers.CharField(allow_null=True, help_text="The connection it ran through, if any.")
    agent = AgentRefSerializer(allow_null=True, help_text="The agent version it was started from, if any.")
    final_text = serializers.CharField(allow_null=True)
    error = serializers.CharField(allow_null=True)
    pending_approval = PendingCallSerializer(many=True, help_text="Calls awaiting a decision (waiting runs).")
    created_at = serializers.DateTimeField()
    started_at = serializers.DateTimeField(allow_null=True)
    finished_at = serializers.DateTimeField(allow_null=True)
    cancel = CancelRecordSerializer(allow_null=True)
    limits = LimitsSerializer()
    parent = ParentSerializer(allow_null=True, help_text="Set on a fork.")
    thread = RunThreadSerializer(allow_null=True, help_text="Set on a run of a thread.")
    children = serializers.ListField(child=serializers.UUIDField(), help_text="Forks of this run the caller may see.")
    owner = serializers.CharField(allow_null=True)
    request = RunRequestEchoSerializer()

    def to_representation(self, instance: AgentRun) -> dict[str, Any]:
        return run_representation(instance, expand_request=self.context.get("expand_request", True))


class RunOutcomeSerializer(RunSerializer):
    """A run after a segment executed here (or was handed to a worker), with what that segment ended with."""

    outcome = serializers.ChoiceField([o.value for o in Outcome])
    detail = serializers.CharField(
        required=False,
        help_text="For a run handed to the workers: that in words (`waiting_for_queue`: the queue was unreachable; "
        "the run is stored and starts once the queue is back).",
    )


class EventSerializer(serializers.Serializer):
    run_id = serializers.UUIDField()
    sequence = serializers.IntegerField()
    kind = serializers.ChoiceField([k.value for k in StepKind])
    round = serializers.IntegerField()
    duration_ms = serializers.FloatField(allow_null=True)
    payload = serializers.DictField()
    created_at = serializers.DateTimeField()


class EventPageSerializer(serializers.Serializer):
    run_id = serializers.UUIDField()
    status = serializers.ChoiceField(RunStatus.choices)
    finished = serializers.BooleanField(help_text="Nothing more will be appended for now; stop polling.")
    results = EventSerializer(many=True)
    next_after = serializers.IntegerField(help_text="Pass as `after` to read on from here.")
    has_more = serializers.BooleanField(help_text="More steps are already recorded past this page.")


class CancelResponseSerializer(serializers.Serializer):
    run_id = serializers.UUIDField()
    outcome = serializers.ChoiceField([o.value for o in CancelOutcome if o != CancelOutcome.NOT_FOUND])
    previous_status = serializers.ChoiceField(RunStatus.choices, help_text="The status the cancel found.")
    status = serializers.ChoiceField(RunStatus.choices, help_text="The status now.")
    stopping = serializers.BooleanField(
        help_text="The run was executing: its step in flight is interrupted and "
        "recorded, then it stops (cancel.stopped_at fills in then)."
    )
    detail = serializers.CharField()
    run = RunSerializer()


class _CountsField(serializers.DictField):
    child = serializers.IntegerField()


class BulkCancelResponseSerializer(serializers.Serializer):
    dry_run = serializers.BooleanField()
    matched = serializers.IntegerField(help_text="Selected runs the caller may see.")
    cancelled = _CountsField(help_text="Previous status -> runs cancelled (in a dry run: that would be).")
    unchanged = _CountsField(help_text="Terminal status -> runs left as they were.")
    cancelled_total = serializers.IntegerField()
    not_found = serializers.IntegerField(
        allow_null=True, help_text="With ids: ids that match no run the caller may see."
    )
    detail = serializers.CharField(help_text="What was (or would be) done, in the words every surface uses.")


class ThreadRunSerializer(serializers.Serializer):
    run_id = serializers.UUIDField()
    position = serializers.IntegerField()
    prompt = serializers.CharField()
    status = serializers.ChoiceField(RunStatus.choices)
    termination_reason = serializers.CharField(allow_null=True)
    multitask_strategy = serializers.CharField(allow_null=True)
    rolled_back = serializers.BooleanField()
    final_text = serializers.CharField(allow_null=True)


class ThreadSerializer(serializers.Serializer):
    """A thread: its owner and its last activity; in detail also its runs and its messages."""

    thread_id = serializers.UUIDField()
    title = serializers.CharField(allow_blank=True)
    owner = serializers.CharField(allow_null=True)
    created_at = serializers.DateTimeField()
    last_activity_at = serializers.DateTimeField()
    busy = serializers.UUIDField(
        allow_null=True, help_text="The first run of the thread still queued, running or waiting."
    )


class ThreadDetailSerializer(ThreadSerializer):
    runs = ThreadRunSerializer(many=True, help_text="Every run of the thread, in message order (rolled back too).")
    messages = serializers.ListField(
        child=serializers.DictField(), help_text="The transcript the thread's next run starts from."
    )
    messages_from = serializers.UUIDField(allow_null=True, help_text="The run whose stream the messages come from.")


class ThreadBusySerializer(serializers.Serializer):
    detail = serializers.CharField()
    thread_id = serializers.UUIDField()
    run_id = serializers.UUIDField(help_text="The run of the thread that is still active.")
    status = serializers.CharField()


class ErrorSerializer(serializers.Serializer):
    detail = serializers.CharField()


class ConflictSerializer(serializers.Serializer):
    detail = serializers.CharField()
    run_id = serializers.UUIDField()
    status = serializers.ChoiceField(RunStatus.choices, help_text="The run's current status.")


class EnqueueFailedSerializer(serializers.Serializer):
    detail = serializers.CharField()
    run_id = serializers.UUIDField(help_text="The run, now failed with reason enqueue_failed.")


class ValidationErrorSerializer(serializers.Serializer):
    """A 400: ``detail`` for an unreadable body, else field -> messages (see ``errors.flatten_errors``)."""
