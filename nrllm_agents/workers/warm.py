"""A warm PostgreSQL connection handed from an RQ worker to each work horse it forks.

A work horse is a fresh ``fork()`` of the worker and exits after one job, so each job would open a
connection (5-10 ms) to a backend whose catalog caches are cold before its claim, which makes the
claim and the first boundary several times slower. Instead the worker opens and warms a connection
while it is idle (touches the run and event tables, prepares the boundary statement) and the horse
inherits it through the fork. After the fork the worker disowns its copy without saying goodbye
to the server, and opens the next one once the horse has finished; the horse closes it when its
job ends; a connection idle past ``STALE_SECONDS`` is checked before it is handed over.

PostgreSQL only: SQLite connections must not cross a fork. Details: docs/internals.md ("A warm
connection for each work horse").
"""

from __future__ import annotations

import logging
import os
import time
import uuid

from django.db import DatabaseError, connection
from django.utils import timezone

logger = logging.getLogger(__name__)

STALE_SECONDS = 30.0
_NIL = uuid.UUID(int=0)
_warmed_at: float | None = None  # when this process's current connection was warmed, if it is


def available() -> bool:
    """True when connections may be handed over (PostgreSQL)."""
    return connection.vendor == "postgresql"


def prepare() -> None:
    """Open and warm the connection the next horse inherits (in the worker, while idle)."""
    global _warmed_at
    if not available():
        return
    from .. import store
    from ..domain import Step, StepKind
    from ..models import AgentRun

    try:
        connection.ensure_connection()
        connection.close_at = None  # the horse's first close_old_connections() must keep it
        # Touch what a claim and a boundary touch; none of these match a row.
        store.claim_queued(_NIL, claimed_by="")
        AgentRun.objects.filter(pk=_NIL).order_by().first()
        store.next_sequence(_NIL)
        store.record_step(_NIL, "", 0, Step(kind=StepKind.REQUEST, round=0, payload={}), timezone.now())
        _warmed_at = time.monotonic()
    except DatabaseError as exc:
        logger.warning("could not warm a connection for the next job (%s); the job opens its own", type(exc).__name__)
        discard()


def before_fork() -> None:
    """Make sure a usable warm connection is open for the horse about to be forked."""
    if not available():
        return
    if _warmed_at is None or connection.connection is None:
        prepare()
    elif time.monotonic() - _warmed_at > STALE_SECONDS and not connection.is_usable():
        discard()
        prepare()


def after_fork_in_worker() -> None:
    """The horse owns the session now: drop the worker's copy without telling the server."""
    global _warmed_at
    _warmed_at = None
    raw = connection.connection if available() else None
    if raw is None:
        return
    try:
        devnull = os.open(os.devnull, os.O_RDWR)
        try:
            os.dup2(devnull, raw.fileno())  # the goodbye below goes nowhere; the horse's socket lives on
        finally:
            os.close(devnull)
    except Exception:  # never let the worker die over this; the close below still happens
        logger.exception("could not detach the handed-over connection")
    discard()


def discard() -> None:
    """Close this process's connection (and forget that it was warm)."""
    global _warmed_at
    _warmed_at = None
    try:
        connection.close()
    except DatabaseError:
        pass
