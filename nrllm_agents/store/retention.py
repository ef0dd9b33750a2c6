"""Retention: purge a stopped run's content past ``content_days``, delete it past ``runs_days``.

A purge keeps the run's skeleton, the audit: status and why, its times, who owned, started and
cancelled it (from where, why, when), provider, model, connection, agent version, tokens and
cost, its tree and thread links; and, of each step, kind, sequence, round, times, duration,
usage, cost and whether a cancel cut it short. What goes is what a person wrote or a model or
tool produced: the prompt, the system prompt and script, the messages, the model's text, tool
arguments and results, notes' bodies, approvals' comments, the stored request payload. Run
and steps carry ``purged_at``; a purged step's payload says ``"purged": true``.

Only a run that is terminal *and stopped* (its segment acknowledged: no step is appended after
that) is ever touched, and that guard is in the statement that locks the rows, so a pass
racing a cancel, a settle or a boundary leaves each run whole. Each batch is one short
transaction over at most ``RETENTION_BATCH`` runs.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import connection, transaction
from django.db.models import Exists, OuterRef, Q, QuerySet
from django.db.models.expressions import RawSQL
from django.utils import timezone

from ..conf import app_settings
from ..models import TERMINAL, AgentRun, AgentRunEvent, Note

# What a purged step keeps of its payload (the ``cancelled`` step, all audit, keeps it whole).
SKELETON_KEYS = (
    "usage",
    "usage_estimated",
    "price",
    "interrupted",
    "finish_reason",
    "failed",
    "name",
    "call_id",
    "provider",
    "model",
    "message_count",
    "approved",
    "by",
    "thread_id",
    "position",
    "after_run",
    "copied_messages",
    "parent_id",
    "from_sequence",
    "parent_status",
    "copied_steps",
)
# What a purged run's ``options`` loses: the words of its system prompt and its script.
CONTENT_OPTIONS = ("system", "script")


@dataclass(frozen=True)
class Policy:
    """``RETENTION`` as read: days before content goes, days before the run goes (None: never)."""

    content_days: int | None = None
    runs_days: int | None = None
    batch: int = 200

    @property
    def active(self) -> bool:
        return self.content_days is not None or self.runs_days is not None

    def describe(self) -> str:
        content = f"content after {self.content_days} days" if self.content_days else "content kept"
        runs = f"runs deleted after {self.runs_days} days" if self.runs_days else "runs kept"
        return f"{content}, {runs}"


def policy() -> Policy:
    """The policy in force (``NRLLM_AGENTS["RETENTION"]``, ``RETENTION_BATCH``)."""
    value = app_settings.RETENTION or {}
    return Policy(value.get("content_days"), value.get("runs_days"), int(app_settings.RETENTION_BATCH))


@dataclass(frozen=True)
class RetentionReport:
    """What one pass did (or, ``dry_run``, would do)."""

    purged_runs: int = 0
    purged_steps: int = 0
    deleted_runs: int = 0
    batches: int = 0
    dry_run: bool = False

    def summary(self) -> str:
        verb = ("would purge", "would delete") if self.dry_run else ("purged", "deleted")
        steps = "" if self.dry_run else f" ({self.purged_steps} steps)"
        return (
            f"retention: {verb[0]} the content of {self.purged_runs} runs{steps}, "
            f"{verb[1]} {self.deleted_runs} runs with their trees"
        )


def _stopped() -> Q:
    """Terminal and stopped: nothing appends a step to such a run any more."""
    return Q(status__in=[s.value for s in TERMINAL], stopped_at__isnull=False)


def purgeable(cutoff: datetime) -> QuerySet[AgentRun]:
    """Runs whose content is due: stopped, finished before ``cutoff``, not purged yet."""
    return AgentRun.objects.filter(_stopped(), purged_at__isnull=True, finished_at__lt=cutoff)


def deletable(cutoff: datetime | None = None) -> QuerySet[AgentRun]:
    """Roots of trees due for deletion: a stopped root finished before ``cutoff`` whose tree holds
    no run still moving (a tree goes whole, or not at all)."""
    moving = AgentRun.objects.filter(tree_root=OuterRef("pk")).exclude(_stopped())
    roots = AgentRun.objects.filter(_stopped(), tree_parent__isnull=True).exclude(Exists(moving))
    return roots if cutoff is None else roots.filter(finished_at__lt=cutoff)


def _locking(queryset: QuerySet[AgentRun]) -> QuerySet[AgentRun]:
    """``queryset`` locked for the batch; a row another transaction holds is skipped (a later
    pass takes it), so no batch waits on a run's own writes."""
    return queryset.select_for_update(skip_locked=connection.features.has_select_for_update_skip_locked)


def _skeleton_sql() -> tuple[str, list[Any]]:
    """The expression that turns a step's ``payload`` into its skeleton, on this database."""
    keys = ", ".join(["%s"] * len(SKELETON_KEYS))
    if connection.vendor == "postgresql":
        kept = (
            "COALESCE((SELECT jsonb_object_agg(k.key, k.value) FROM jsonb_each(CASE WHEN jsonb_typeof(payload) = "
            f"'object' THEN payload ELSE '{{}}'::jsonb END) k WHERE k.key IN ({keys})), '{{}}'::jsonb)"
        )
        sql = f"CASE WHEN kind = 'cancelled' THEN payload ELSE {kept} || '{{\"purged\": true}}'::jsonb END"
    else:
        # json_each gives true / false as 1 / 0, and objects and arrays as text: made JSON again
        value = (
            "CASE k.type WHEN 'true' THEN json('true') WHEN 'false' THEN json('false') "
            "WHEN 'object' THEN json(k.value) WHEN 'array' THEN json(k.value) ELSE k.value END"
        )
        each = f"FROM json_each(payload) k WHERE k.key IN ({keys})"
        kept = f"COALESCE((SELECT json_group_object(k.key, {value}) {each}), '{{}}')"
        sql = f"CASE WHEN kind = 'cancelled' THEN payload ELSE json_set({kept}, '$.purged', json('true')) END"
    return sql, list(SKELETON_KEYS)


def _options_sql() -> str:
    if connection.vendor == "postgresql":
        return "CASE WHEN jsonb_typeof(options) = 'object' THEN options - 'system' - 'script' ELSE options END"
    return "json_remove(options, '$.system', '$.script')"


def purge(run_ids: list[uuid.UUID], now: datetime | None = None) -> tuple[int, int]:
    """Purge the content of those of ``run_ids`` that are still stopped and unpurged, in one
    short transaction. The guard is in the statement that locks the rows; a run it skips is
    left untouched. Returns ``(runs, steps)`` purged."""
    now = now or timezone.now()
    with transaction.atomic():
        locked = _locking(AgentRun.objects.filter(_stopped(), pk__in=run_ids, purged_at__isnull=True))
        ids = list(locked.values_list("pk", flat=True))
        if not ids:
            return 0, 0
        AgentRun.objects.filter(pk__in=ids).update(
            prompt="",
            final_text="",
            request_payload=None,
            suspended_state=None,
            pending_effect=None,
            options=RawSQL(_options_sql(), []),
            purged_at=now,
        )
        steps = AgentRunEvent.objects.filter(run_id__in=ids).update(payload=RawSQL(*_skeleton_sql()), purged_at=now)
        Note.objects.filter(run_id__in=ids).update(body="")
    return len(ids), steps


def delete(root_ids: list[uuid.UUID]) -> int:
    """Delete those of ``root_ids`` that are still due roots, each with its whole tree, in one
    short transaction (the roots are locked first: a spawn into the tree waits, then finds it
    gone). Returns how many runs went."""
    with transaction.atomic():
        roots = list(_locking(deletable().filter(pk__in=root_ids)).values_list("pk", flat=True))
        if not roots:
            return 0
        _, by_model = AgentRun.objects.filter(Q(pk__in=roots) | Q(tree_root__in=roots)).delete()
    return by_model.get(AgentRun._meta.label, 0)


def _batches(queryset: QuerySet[AgentRun], size: int, limit: int | None) -> Iterator[list[uuid.UUID]]:
    """Ids of ``queryset`` in batches of ``size``, oldest first, at most ``limit`` batches; the
    caller stops early when a batch changed nothing (its rows were all locked elsewhere)."""
    done = 0
    while limit is None or done < limit:
        ids = list(queryset.order_by("finished_at").values_list("pk", flat=True)[:size])
        if not ids:
            return
        yield ids
        done += 1
        if len(ids) < size:
            return


def apply(
    chosen: Policy | None = None, *, now: datetime | None = None, dry_run: bool = False, max_batches: int | None = None
) -> RetentionReport:
    """Apply the policy: delete the trees past ``runs_days``, then purge the content past
    ``content_days``, in batches of ``batch`` runs. ``dry_run``: count what is due, change nothing.
    ``max_batches`` bounds the batches of each kind (a maintenance pass's share)."""
    chosen = chosen or policy()
    now = now or timezone.now()
    deleted = purged = steps = batches = 0
    if chosen.runs_days is not None:
        due = deletable(now - timedelta(days=chosen.runs_days))
        if dry_run:
            deleted = AgentRun.objects.filter(Q(pk__in=due.values("pk")) | Q(tree_root__in=due.values("pk"))).count()
        else:
            for ids in _batches(due, chosen.batch, max_batches):
                gone = delete(ids)
                deleted, batches = deleted + gone, batches + 1
                if not gone:
                    break
    if chosen.content_days is not None:
        due = purgeable(now - timedelta(days=chosen.content_days))
        if dry_run:
            purged = due.count()
        else:
            for ids in _batches(due, chosen.batch, max_batches):
                runs, n = purge(ids, now)
                purged, steps, batches = purged + runs, steps + n, batches + 1
                if not runs:
                    break
    return RetentionReport(purged, steps, deleted, batches, dry_run)
