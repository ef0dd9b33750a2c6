"""A warm PostgreSQL connection handed from an RQ worker to each work horse it forks.

A work horse is a fresh ``fork()`` of the worker and exits after one job, so each job used to
open its own PostgreSQL connection before its claim: the connection (5-10 ms) and then a
backend whose catalog caches are cold, which made the claim and the first boundary several
times slower than on a used connection. Instead the worker opens the connection while it is
idle, warms it (touches the run and event tables and prepares the boundary statement) and the
horse inherits it through the fork:

- after the fork the worker no longer owns that session: it points its copy of the socket at
  ``/dev/null`` before closing it, so its goodbye never reaches the server, and it opens the
  next warm connection once the horse has finished (off the next job's critical path);
- the horse closes the connection properly when its job ends (``GracefulWorker.perform_job``);
- a connection idle for longer than ``STALE_SECONDS`` is checked (one round trip) before it is
  handed over, and replaced when unusable.

PostgreSQL only: SQLite connections must not cross a fork, and nothing is handed over there.
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
