"""The documented response shapes of the REST API.

They describe the JSON that ``nrllm_agents.presentation.presenters`` builds; they render through
the presenters, never beside them, and the schemathesis test proves the served schema and the
responses agree. What a caller sends is validated by ``serializers``.
"""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from ..domain import StepKind
from ..models import AgentRun, CancelSource, MultitaskStrategy, RunStatus, TerminationReason
from ..presentation import trees
from ..presentation.presenters import run_status_dict
from ..runtime.agent_runtime import CancelOutcome, Outcome


def run_representation(run: AgentRun, *, expand_request: bool = True, tree: bool = False) -> dict[str, Any]:
    """A run as the API shows it: the shared status payload, its owner, its request and its forks.

    ``children`` lists the forks prefetched as ``visible_children`` (those the caller may see);
    the sub-agent runs are ``tree.children`` (the key predates trees: renaming it would change
    what it means for every client of forks).

    Without ``expand_request`` (lists, unless ``?expand=request``) the request leaves out its
    bulky parts, the script and the system prompt. With ``tree`` (a run's own page): its
    sub-agents' runs and its subtree's spend (``presentation.trees``).
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
    if options.get("agents"):
        request["agents"] = list(options["agents"])
    return {
        **run_status_dict(run),
        **trees.place(run),
        **({"tree": trees.tree_dict(run)} if tree else {}),
        "children": [str(child.pk) for child in getattr(run, "visible_children", ())],
        "owner": run.owner.get_username() if run.owner is not None else None,
        "request": request,
    }


# --- input ----------------------------------------------------------------------------------


class UsageSerializer(serializers.Serializer[Any]):
    prompt_tokens = serializers.IntegerField()
    completion_tokens = serializers.IntegerField()
    total_tokens = serializers.IntegerField()


class PendingCallSerializer(serializers.Serializer[Any]):
    id = serializers.CharField()
    name = serializers.CharField()
    arguments = serializers.DictField()


class InDoubtSerializer(serializers.Serializer[Any]):
    call = PendingCallSerializer(help_text="The call a lost worker was making.")
    at = serializers.DateTimeField(allow_null=True, help_text="When the call started.")


class LimitDetailSerializer(serializers.Serializer[Any]):
    limit = serializers.ChoiceField(
        ["deadline_seconds", "max_total_tokens", "max_cost"], help_text="The limit exceeded."
    )
    value = serializers.JSONField(help_text="The limit's value (a number; for max_cost a decimal string).")
    measured = serializers.JSONField(
        help_text="What was measured when it stopped the run (a number; for max_cost a decimal string)."
    )
    unit = serializers.CharField(help_text="s, tokens, or the currency (max_cost).")


class AgentRefSerializer(serializers.Serializer[Any]):
    name = serializers.CharField()
    version = serializers.IntegerField(help_text="Exactly this version (its definition is kept with the run).")


class CostSerializer(serializers.Serializer[Any]):
    amount = serializers.CharField(help_text="A decimal string, exact: the run's model calls at the prices in force.")
    currency = serializers.CharField()
    estimated = serializers.BooleanField(help_text="Part of it was priced from an interrupted call's estimated tokens.")


class LimitsSerializer(serializers.Serializer[Any]):
    deadline_seconds = serializers.IntegerField(allow_null=True, help_text="null: no deadline.")
    max_total_tokens = serializers.IntegerField(allow_null=True, help_text="null: no token budget.")
    max_cost = serializers.CharField(allow_null=True, help_text="A decimal string; null: no cost limit.")
    deadline_at = serializers.DateTimeField(
        allow_null=True, help_text="When the deadline passes (approval waits so far added back); null: no deadline."
    )


class ParentSerializer(serializers.Serializer[Any]):
    run_id = serializers.UUIDField(help_text="The run this one was forked from.")
    from_sequence = serializers.IntegerField(help_text="The parent's last step copied into this run.")


class CancelRecordSerializer(serializers.Serializer[Any]):
    requested_at = serializers.DateTimeField()
    by = serializers.CharField(allow_null=True, help_text="Username of who cancelled, if a user did.")
    # (DRF's metaclass takes declared fields off the class; the stubs see Field.source shadowed)
    source = serializers.ChoiceField(CancelSource.choices, allow_null=True)  # type: ignore[assignment]
    reason = serializers.CharField(allow_null=True)
    stopped_at = serializers.DateTimeField(
        allow_null=True, help_text="When execution stopped; null while an executing run reaches its next boundary."
    )
    limit = LimitDetailSerializer(allow_null=True, help_text="Set when a limit cancelled the run (source system).")


class RunRequestEchoSerializer(serializers.Serializer[Any]):
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


class RunThreadSerializer(serializers.Serializer[Any]):
    thread_id = serializers.UUIDField(help_text="The thread this run answers a message of.")
    position = serializers.IntegerField(help_text="The message's place in its thread, from 0.")
    multitask_strategy = serializers.ChoiceField(MultitaskStrategy.choices, allow_null=True)
    rolled_back = serializers.BooleanField(help_text="A later message rolled this run's turn out of the transcript.")


class TreeChildSerializer(serializers.Serializer[Any]):
    run_id = serializers.UUIDField(help_text="A sub-agent run this run started.")
    agent = serializers.CharField(allow_null=True, help_text="The saved agent it runs.")
    status = serializers.ChoiceField(RunStatus.choices)
    call_id = serializers.CharField(help_text="The parent's sub-agent call it answers.")
    tokens = serializers.IntegerField(help_text="Its own tokens (not its subtree's).")
    cost = serializers.CharField(allow_null=True, help_text="Its own cost, a decimal string; null: not priced.")


class TreeSpendSerializer(serializers.Serializer[Any]):
    prompt_tokens = serializers.IntegerField()
    completion_tokens = serializers.IntegerField()
    total_tokens = serializers.IntegerField()
    cost = serializers.CharField(allow_null=True, help_text="A decimal string; null: no run of it was priced.")
    cost_estimated = serializers.BooleanField(help_text="Part of it was priced from estimated tokens.")


class TreeApprovalSerializer(serializers.Serializer[Any]):
    run_id = serializers.UUIDField()
    depth = serializers.IntegerField()
    agent = serializers.CharField(allow_null=True)
    tools = serializers.ListField(child=serializers.CharField(), help_text="The tools whose calls wait.")
    call_ids = serializers.ListField(child=serializers.CharField())
    detail = serializers.CharField(help_text="In words: `waits for the approval of write_note in run …`.")


class TreeSerializer(serializers.Serializer[Any]):
    children = TreeChildSerializer(
        many=True, help_text="Its sub-agent runs (the runs its calls started), oldest first; not its forks."
    )
    runs = serializers.IntegerField(help_text="Runs of its subtree, itself included.")
    awaiting_approval = TreeApprovalSerializer(
        many=True,
        help_text="The runs below it waiting for approval; approving this run decides theirs "
        "(`run_id` in the body picks one when several wait).",
    )
    spend = TreeSpendSerializer(help_text="What its whole subtree spent, itself included (on a root: the tree's).")


class RunSerializer(serializers.Serializer[Any]):
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
    in_doubt = InDoubtSerializer(
        allow_null=True,
        help_text="A waiting run's call that may or may not have happened (its worker was lost during it): "
        "decide with POST /api/runs/{id}/resolve/, or cancel the run. null otherwise.",
    )
    created_at = serializers.DateTimeField()
    started_at = serializers.DateTimeField(allow_null=True)
    finished_at = serializers.DateTimeField(allow_null=True)
    purged_at = serializers.DateTimeField(
        allow_null=True,
        help_text="When the retention policy purged its content (prompt, texts, each step's content: "
        'a purged step\'s payload is its skeleton with `"purged": true`); null: not purged.',
    )
    cancel = CancelRecordSerializer(allow_null=True)
    limits = LimitsSerializer()
    parent = ParentSerializer(allow_null=True, help_text="Set on a fork.")
    thread = RunThreadSerializer(allow_null=True, help_text="Set on a run of a thread.")
    children = serializers.ListField(
        child=serializers.UUIDField(),
        help_text="Forks of this run the caller may see (its sub-agent runs are in `tree.children`).",
    )
    parent_id = serializers.UUIDField(allow_null=True, help_text="The run whose sub-agent call started this one.")
    root_id = serializers.UUIDField(
        help_text="The root of its tree of runs (itself when no sub-agent call started it)."
    )
    depth = serializers.IntegerField(help_text="Its depth in its tree (the root: 0).")
    tree = TreeSerializer(
        required=False,
        help_text="A run's own page (`GET /api/runs/{id}/`) only: its sub-agent runs (`tree.children`), "
        "the runs below it waiting for approval (`tree.awaiting_approval`) and the spend of its whole subtree.",
    )
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


class EventSerializer(serializers.Serializer[Any]):
    run_id = serializers.UUIDField()
    sequence = serializers.IntegerField()
    kind = serializers.ChoiceField([k.value for k in StepKind])
    round = serializers.IntegerField()
    duration_ms = serializers.FloatField(allow_null=True)
    payload = serializers.DictField()
    created_at = serializers.DateTimeField()


class EventPageSerializer(serializers.Serializer[Any]):
    run_id = serializers.UUIDField()
    status = serializers.ChoiceField(RunStatus.choices)
    finished = serializers.BooleanField(help_text="Nothing more will be appended for now; stop polling.")
    results = EventSerializer(many=True)
    next_after = serializers.IntegerField(help_text="Pass as `after` to read on from here.")
    has_more = serializers.BooleanField(help_text="More steps are already recorded past this page.")


class CancelResponseSerializer(serializers.Serializer[Any]):
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


class BulkCancelResponseSerializer(serializers.Serializer[Any]):
    dry_run = serializers.BooleanField()
    matched = serializers.IntegerField(help_text="Selected runs the caller may see.")
    cancelled = _CountsField(help_text="Previous status -> runs cancelled (in a dry run: that would be).")
    unchanged = _CountsField(help_text="Terminal status -> runs left as they were.")
    cancelled_total = serializers.IntegerField()
    not_found = serializers.IntegerField(
        allow_null=True, help_text="With ids: ids that match no run the caller may see."
    )
    detail = serializers.CharField(help_text="What was (or would be) done, in the words every surface uses.")


class ThreadRunSerializer(serializers.Serializer[Any]):
    run_id = serializers.UUIDField()
    position = serializers.IntegerField()
    prompt = serializers.CharField()
    status = serializers.ChoiceField(RunStatus.choices)
    termination_reason = serializers.CharField(allow_null=True)
    multitask_strategy = serializers.CharField(allow_null=True)
    rolled_back = serializers.BooleanField()
    final_text = serializers.CharField(allow_null=True)
    purged_at = serializers.DateTimeField(allow_null=True, help_text="Its content was purged (retention).")


class ThreadSerializer(serializers.Serializer[Any]):
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
    purged_turns = serializers.IntegerField(
        help_text="Turns whose content the retention policy purged; when the latest was, `messages` is what is left."
    )


class ThreadBusySerializer(serializers.Serializer[Any]):
    detail = serializers.CharField()
    thread_id = serializers.UUIDField()
    run_id = serializers.UUIDField(help_text="The run of the thread that is still active.")
    status = serializers.CharField()


class ErrorSerializer(serializers.Serializer[Any]):
    detail = serializers.CharField()


class ConflictSerializer(serializers.Serializer[Any]):
    detail = serializers.CharField()
    run_id = serializers.UUIDField()
    status = serializers.ChoiceField(RunStatus.choices, help_text="The run's current status.")


class EnqueueFailedSerializer(serializers.Serializer[Any]):
    detail = serializers.CharField()
    run_id = serializers.UUIDField(help_text="The run, now failed with reason enqueue_failed.")


class ValidationErrorSerializer(serializers.Serializer[Any]):
    """A 400: ``detail`` for an unreadable body, else field -> messages (see ``errors.flatten_errors``)."""
