"""Request validation of the REST API (the response shapes are ``responses``).

Input serializers validate what a caller sends (cancel, approve, bulk cancel, list and event
query parameters) strictly, as the schema states it. A run's creation request is checked for
shape by ``CreateRunSerializer``, then by ``RunRequest.from_mapping``, the one validator every
surface shares.
"""

from __future__ import annotations

from typing import Any, cast

from django.core.validators import MaxValueValidator
from rest_framework import serializers

from ..conf import app_settings
from ..domain.providers.scripted import MAX_DELAY_SECONDS, MAX_USAGE_TOKENS
from ..models import MultitaskStrategy, RunStatus, TerminationReason
from ..store import MAX_REASON_CHARS, MAX_SEQUENCE
from ..validation.run_request import MAX_PROMPT_CHARS
from .fields import (
    CostField,
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


class RunFilterSerializer(serializers.Serializer[Any]):
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


class TreeRootSerializer(serializers.Serializer[Any]):
    """``GET /api/runs/?root=ID``: the runs of one tree (its root and every run below it)."""

    root = serializers.UUIDField(required=False, help_text="Only the runs of this run's tree (it and its sub-agents').")  # type: ignore[assignment]


class EventsQuerySerializer(serializers.Serializer[Any]):
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


class ClosedSerializer(serializers.Serializer[Any]):
    """A request body that names only known fields: an unknown one is a 400, as on create."""

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        data = self.initial_data
        unknown = sorted(map(str, set(data) - set(self.fields))) if isinstance(data, dict) else []
        if unknown:
            raise serializers.ValidationError({"non_field_errors": [f"unknown fields: {', '.join(unknown)}"]})
        validated: dict[str, Any] = super().validate(attrs)
        return validated


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
    reason = reason_field("Why the calls are approved or denied; recorded on the approval step.")
    run_id = StrictUUIDField(
        required=False,
        help_text="In a tree: the run below this one whose approval to decide, when several wait "
        "(one alone is found without it).",
    )


class ResolveRequestSerializer(ClosedSerializer):
    happened = StrictBooleanField(
        help_text="true: the call in doubt did happen, and `result` is recorded as its result (it is not made "
        "again); false: it did not, and it is made again."
    )
    result = serializers.JSONField(
        required=False,
        allow_null=True,
        default=None,
        help_text="With `happened: true`: what the call returned, as the model reads it (any JSON, at most 256 KiB).",
    )
    queued = StrictBooleanField(
        required=False, default=False, help_text="Hand the resumed run to a worker instead of running it now."
    )
    reason = reason_field("Why: how you know; recorded on the decision's step.")
    run_id = StrictUUIDField(
        required=False,
        help_text="In a tree: the run below this one whose call is in doubt, when several wait.",
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if not attrs["happened"] and "result" in self.initial_data:
            raise serializers.ValidationError(
                {"result": "only with happened: true (a call that did not happen has none)"}
            )
        validated: dict[str, Any] = super().validate(attrs)
        return validated


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


class _TurnUsageSerializer(serializers.Serializer[Any]):
    prompt_tokens = StrictIntegerField(required=False, min_value=0, max_value=MAX_USAGE_TOKENS)
    completion_tokens = StrictIntegerField(required=False, min_value=0, max_value=MAX_USAGE_TOKENS)


class _ScriptToolCallSerializer(serializers.Serializer[Any]):
    name = StrictCharField()
    arguments = serializers.DictField(required=False)


class ScriptTurnSerializer(serializers.Serializer[Any]):
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


class CreateRunSerializer(serializers.Serializer[Any]):
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
        # Any name: the validator accepts exactly what GET /api/tools/ lists (MCP tools included)
        # and answers 400 naming an unknown one.
        child=StrictCharField(max_length=200, trim_whitespace=False),
        required=False,
        max_length=100,
        help_text="Tools the agent may call, by the names GET /api/tools/ lists; default from settings.",
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
    max_cost = CostField(
        required=False,
        help_text="Cancel the run (cost_exceeded) after the model call that takes its cost above this "
        'amount (a plain decimal string such as "0.50", in the configured currency); default from settings.',
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
        # (``fields`` maps names to the base Field: these are the fields declared above)
        cast(serializers.ChoiceField, self.fields["provider"]).choices = sorted(app_settings.PROVIDERS)
        for name, setting in (
            ("max_iterations", "MAX_ITERATIONS_LIMIT"),
            ("deadline_seconds", "DEADLINE_SECONDS_LIMIT"),
            ("max_total_tokens", "MAX_TOTAL_TOKENS_LIMIT"),
        ):
            limit = int(getattr(app_settings, setting))
            field = cast(StrictIntegerField, self.fields[name])
            field.max_value = limit
            field.validators.append(MaxValueValidator(limit))


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
