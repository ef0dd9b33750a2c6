"""Hot statements sent as server-side prepared statements on Django's own PostgreSQL connection.

Django's psycopg backend binds parameters on the client by default, so PostgreSQL parses and
plans the step boundary's statement on every step. The few statements on a hot path (the
boundary, the one-statement cancel, the claim) go through :func:`execute` instead: a psycopg
cursor with server-side binding on the connection Django manages, ``prepare=True`` so the
statement is parsed and planned once per connection. What stays Django's:

- the connection and its transaction state: the statement runs in whatever transaction (or
  autocommit) Django has open, exactly as a Django cursor's would;
- error translation: psycopg errors surface as ``django.db`` exceptions (``DatabaseError``,
  ``IntegrityError``...), so callers catch the same exceptions as before;
- ``connection.execute_wrapper`` hooks (instrumentation, fault injection in tests) still see
  every statement.

Not for SQLite: callers keep their ORM path there. Behind a transaction-mode PgBouncer the
prepared statements need PgBouncer >= 1.21 with ``max_prepared_statements`` set; otherwise set
``NRLLM_AGENTS["PREPARED_STATEMENTS"] = False`` (env ``NRLLM_PREPARED_STATEMENTS=0``) and the
statements are server-side bound without being prepared (see ``bench/README.md``).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from django.db import DEFAULT_DB_ALIAS, connection, connections

from ..conf import app_settings

_NEVER_AUTOMATICALLY = 2**31 - 1  # prepare only what asks for it (prepare=True)


def enabled() -> bool:
    """True when the default connection is PostgreSQL (the only engine these statements target)."""
    return connection.vendor == "postgresql"


def execute(sql: str, params: Sequence[Any], *, fetch: bool = False) -> tuple[int, list[tuple[Any, ...]]]:
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

            def run(sql: str, params: Sequence[Any], many: bool, context: dict[str, Any]) -> None:
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
