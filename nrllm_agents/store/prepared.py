"""Hot statements sent as server-side prepared statements on Django's own PostgreSQL connection.

Django's psycopg backend binds parameters on the client, so PostgreSQL would parse and plan the
step boundary's statement on every step. The few statements on a hot path (the boundary, the
one-statement cancel, the claim) go through :func:`execute` instead: server-side binding with
``prepare=True`` on the connection Django manages, in whatever transaction Django has open, with
psycopg errors surfacing as ``django.db`` exceptions and ``execute_wrapper`` hooks seeing every
statement.

Not for SQLite: callers keep their ORM path there. Behind a transaction-mode PgBouncer older than
1.21, set ``NRLLM_PREPARED_STATEMENTS=0`` (bound, not prepared). Details: docs/internals.md
("Prepared statements") and docs/operations/deploy.md.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

from django.db import DEFAULT_DB_ALIAS, connection, connections

from ..conf import app_settings

_NEVER_AUTOMATICALLY = 2**31 - 1  # prepare only what asks for it (prepare=True)


def enabled() -> bool:
    """True when the default connection is PostgreSQL (the only engine these statements target)."""
    return connection.vendor == "postgresql"


def execute(
    sql: str, params: Sequence[Any] | Mapping[str, Any], *, fetch: bool = False
) -> tuple[int, list[tuple[Any, ...]]]:
    """Run one statement prepared on the current connection.

    Returns ``(rowcount, rows)``; ``rows`` is filled only with ``fetch=True``. Raises the
    ``django.db`` exception matching what PostgreSQL reported.

    On the step path, so it looks the thread's connection up once (each ``connection.``
    attribute is a lookup of its own) and keeps one server-binding cursor per psycopg
    connection, made on first use.
    """
    db = connections[DEFAULT_DB_ALIAS]
    if db.connection is None:
        db.ensure_connection()
    db.validate_no_broken_transaction()
    raw = db.connection
    prepare = bool(app_settings.PREPARED_STATEMENTS)
    if prepare and raw.prepare_threshold is None:
        # Django opens connections with preparation disabled, which also ignores an explicit
        # prepare=True. Its own cursors bind on the client and never prepare, so enabling it
        # here affects only the statements sent through this function.
        raw.prepare_threshold = _NEVER_AUTOMATICALLY
    with db.wrap_database_errors:
        cursor = _cursor(raw)
        wrappers = db.execute_wrappers
        if wrappers:

            def run(sql: str, params: Sequence[Any] | Mapping[str, Any], many: bool, context: dict[str, Any]) -> None:
                cursor.execute(sql, params, prepare=prepare)

            executor = run
            for wrapper in reversed(wrappers):
                executor = functools.partial(wrapper, executor)
            executor(sql, params, False, {"connection": db, "cursor": cursor})
        else:
            cursor.execute(sql, params, prepare=prepare)
        return cursor.rowcount, (cursor.fetchall() if fetch else [])


def _cursor(raw: Any) -> Any:
    """The psycopg connection's own server-binding cursor (a plain ``psycopg.Cursor``, not the
    connection's client-binding factory), made on first use. A connection serves one thread
    at a time, so one cursor is enough; a pooled connection takes it along to its next user."""
    cursor = getattr(raw, "_nrllm_cursor", None)
    if cursor is None or cursor.closed:
        import psycopg

        cursor = raw._nrllm_cursor = psycopg.Cursor(raw)
    return cursor
