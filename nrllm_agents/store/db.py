"""Database connections held only while used.

A segment needs the database at its step boundaries, for milliseconds, and not during a model
call that may take minutes. Between boundaries it gives its thread's connection back: to the
process's bounded pool (PostgreSQL with Django's psycopg pool), closed (SQLite, where opening one
costs well under a millisecond), or kept (PostgreSQL without a pool, ``NRLLM_DB_POOL_MAX=0``).
A thread about to sit idle for long (a pushed watcher between two pushes) gives it back even
without a pool (``idle=True``), so an idle watcher holds no connection at all.

Each case and why: docs/internals.md ("Connections held only while used").
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

import django
from django.db import InterfaceError, OperationalError, connections

from ..conf import app_settings

__all__ = [
    "check_pooled_connection",
    "check_pools_before_use",
    "connection_lost",
    "pool_max_size",
    "pooled",
    "reconnecting",
    "release_connection",
]

T = TypeVar("T")
RECONNECT_PAUSES = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5)  # then every 0.5 s: back within 0.5 s of a storm's end
RECONNECT_SECONDS = 30.0  # the longest a segment tries to reach the database again (at most half its lease)


def pooled(alias: str = "default") -> bool:
    """True when ``alias`` draws its connections from a psycopg pool."""
    return bool(connections[alias].settings_dict.get("OPTIONS", {}).get("pool"))


def pool_max_size(alias: str = "default") -> int | None:
    """The pool bound of ``alias`` (``None`` without a pool)."""
    options = connections[alias].settings_dict.get("OPTIONS", {}).get("pool")
    if not options:
        return None
    return int(options.get("max_size", 4)) if isinstance(options, dict) else 4  # psycopg_pool's own default


def release_connection(alias: str = "default", *, idle: bool = False) -> None:
    """Give this thread's connection back (see the module docstring): between step boundaries,
    to its pool or closed on SQLite; with ``idle``, closed whatever the engine (the thread waits
    for long and holds none meanwhile).

    Never inside a transaction (the caller's ``atomic()`` keeps its connection) and never an
    error: a connection that cannot be closed cleanly is dropped by the next use anyway.
    """
    connection = connections[alias]
    if connection.connection is None or connection.in_atomic_block:
        return
    if idle or connection.vendor == "sqlite" or pooled(alias):
        try:
            connection.close()
        except Exception:  # a broken connection: the pool discards it, the next use reconnects
            pass


def check_pooled_connection(conn: Any) -> None:
    """The ``check`` of a psycopg pool (``OPTIONS["pool"]["check"]``): raises for a connection the
    server closed, so the pool drops it instead of handing it out.

    When one is dead, the others idle beside it usually died with it (a restart, a failover,
    ``pg_terminate_backend``): every pool of the process is then checked at once, so the caller's
    next attempt draws a live connection instead of the next dead one after a growing backoff.
    """
    from psycopg_pool import ConnectionPool

    try:
        ConnectionPool.check_connection(conn)
    except Exception:
        for alias in connections:
            pool = getattr(connections[alias], "pool", None)
            if pool is not None:
                try:
                    pool.check()
                except Exception:  # the server is away: the caller's retries wait for it
                    pass
        raise


def check_pools_before_use() -> list[str]:
    """Give every PostgreSQL pool of ``DATABASES`` that has no ``check`` of its own
    ``check_pooled_connection`` (``pool: True`` becomes a dict with it); before Django 6.1, which
    passes its own ``check=``, ``CONN_HEALTH_CHECKS`` instead (psycopg_pool's plain check). Called from the app's
    ``ready()``, before any pool is built (Django builds it at the first connection). Returns the
    aliases it changed."""
    from django.conf import settings

    changed = []
    for alias, config in settings.DATABASES.items():
        options = config.get("OPTIONS") or {}
        pool = options.get("pool")
        if "postgresql" not in str(config.get("ENGINE", "")) or not pool:
            continue
        if pool is True:
            pool = options["pool"] = {}
        if not isinstance(pool, dict) or pool.get("check") or config.get("CONN_HEALTH_CHECKS"):
            continue
        if django.VERSION >= (6, 1):  # the pool's own "check" option overrides Django's
            pool["check"] = check_pooled_connection
        else:  # Django passes check= itself (an option of that name is a TypeError): ask for its own
            config["CONN_HEALTH_CHECKS"] = True
        changed.append(alias)
    return changed


def connection_lost(exc: BaseException) -> bool:
    """Whether ``exc`` is the failure of a connection itself (terminated, reset, the server away),
    as Django reports it: the next try must take a fresh one."""
    return isinstance(exc, (OperationalError, InterfaceError))


def reconnect_seconds() -> float:
    """How long ``reconnecting`` goes on: ``RECONNECT_SECONDS``, at most half the lease."""
    return min(RECONNECT_SECONDS, float(app_settings.LEASE_SECONDS) / 2)


def reconnecting(attempt: Callable[[], T], *, alias: str = "default", seconds: float | None = None) -> T:
    """``attempt()``, tried again on a fresh connection while the connection it used dies
    (``connection_lost``), with pauses growing to 0.5 s, for at most ``seconds``
    (``reconnect_seconds()``); then the last error is raised. Inside a transaction it is tried
    once: the caller's ``atomic()`` owns the connection.

    A segment's writes go through it, so a connection that dies under a run (a terminated
    backend, a failover) is replaced at once and the run goes on, instead of waiting for the
    reaper (issue 44, item 16)."""
    deadline = time.monotonic() + (reconnect_seconds() if seconds is None else seconds)
    tries = 0
    while True:
        try:
            return attempt()
        except Exception as exc:
            connection = connections[alias]
            if not connection_lost(exc) or connection.in_atomic_block:
                raise
            pause = RECONNECT_PAUSES[min(tries, len(RECONNECT_PAUSES) - 1)]
            if time.monotonic() + pause > deadline:
                raise
            drop_connection(alias)
            tries += 1
            time.sleep(pause)


def drop_connection(alias: str = "default") -> None:
    """Give up this thread's connection (a broken one is discarded by its pool); the next query
    opens or draws a fresh one. Never inside a transaction, never an error."""
    connection = connections[alias]
    if connection.in_atomic_block:
        return
    try:
        connection.close()
    except Exception:
        connection.connection = None
