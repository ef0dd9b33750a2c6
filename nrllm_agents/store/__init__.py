"""The one writer of ``AgentRun.status``. Every transition is a fence.

Each fence is either a guarded ``UPDATE ... WHERE status IN (...)`` (compare-and-set) or a
``select_for_update`` + check + write inside one transaction, and returns a small value
saying what happened. On SQLite the database is opened with ``transaction_mode=IMMEDIATE``
so the read-check-write transactions are serialised there as well. On PostgreSQL the cancel
and the claim fences are each one prepared statement whose CTE takes the row lock
(``cancels``, ``claims``), and the step boundary is one prepared statement (``prepared``).
"""

from .bulk import BulkCancel, cancel_many
from .cancels import cancel
from .claims import claim_queued
from .journal import MAX_SEQUENCE, RECOVER, append_event, next_sequence, step_columns
from .leases import Reaped, ReapReport, append_owned, lease_until, reap, record_step, renew, requeue, why_not_held
from .results import MAX_REASON_CHARS, NOT_FOUND, InvalidArgument, Lease, Operator, Transition, reason_problem
from .runs import (
    acknowledge_cancel,
    begin,
    claim_for_resume,
    create_queued,
    events,
    keep_trace_context,
    probe_status,
    requeue_for_resume,
    settle,
    suspend,
)

__all__ = [
    "MAX_REASON_CHARS",
    "MAX_SEQUENCE",
    "InvalidArgument",
    "reason_problem",
    "NOT_FOUND",
    "RECOVER",
    "BulkCancel",
    "Reaped",
    "ReapReport",
    "Lease",
    "Operator",
    "Transition",
    "acknowledge_cancel",
    "append_event",
    "append_owned",
    "begin",
    "cancel",
    "cancel_many",
    "claim_for_resume",
    "claim_queued",
    "create_queued",
    "events",
    "keep_trace_context",
    "lease_until",
    "next_sequence",
    "probe_status",
    "reap",
    "record_step",
    "renew",
    "requeue",
    "requeue_for_resume",
    "settle",
    "step_columns",
    "suspend",
    "why_not_held",
]
