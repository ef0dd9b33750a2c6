"""A history of runs written by SQL in seconds: what ``bench/volume.py`` and the test of the admin
at a million runs fill their database with (``INSERT ... SELECT`` over ``generate_series``; the
ORM would take an hour for a million runs).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

SECONDS_APART = 8.64  # 10,000 runs a day


def constants(model: Any, given: set[str]) -> dict[str, Any]:
    """The NOT NULL columns of ``model`` the fill does not set, with their model default (so a
    column added later is filled too)."""
    from django.db import connection
    from django.db.models import NOT_PROVIDED, CharField, TextField

    out: dict[str, Any] = {}
    for field in model._meta.concrete_fields:
        if field.column in given or field.null or field.primary_key or field.db_default is not NOT_PROVIDED:
            continue
        if field.has_default():
            value = field.get_default()
        elif isinstance(field, CharField | TextField):
            value = ""
        else:
            raise ValueError(f"no value for {model.__name__}.{field.name}: add it to the fill")
        out[field.column] = field.get_db_prep_save(value, connection)
    return out


_AT = "(%(base)s::timestamptz - (%(top)s - g) * interval '1 second' * %(apart)s)"  # run g's creation
RUN_COLUMNS = {
    "id": "md5('run' || g)::uuid",
    "status": "CASE WHEN g %% 10 = 0 THEN 'cancelled' ELSE 'completed' END",
    "termination_reason": "CASE WHEN g %% 10 = 0 THEN 'cancelled' ELSE 'completed' END",
    "owner_id": "(%(users)s::int[])[1 + g %% cardinality(%(users)s::int[])]",
    "prompt": "'order #' || g || ' ' || (ARRAY['summarise the invoice', 'draft a reply to the customer',"
    " 'check the stock level', 'plan the delivery route', 'translate the note'])[1 + g %% 5]",
    "provider": "CASE WHEN g %% 20 = 0 THEN 'anthropic' WHEN g %% 4 = 1 THEN 'openai' ELSE 'scripted' END",
    "model": "'m'",
    "created_at": _AT,
    "started_at": f"{_AT} + interval '0.1 s'",
    "finished_at": f"{_AT} + interval '2 s'",
    "iterations": "2",
    "prompt_tokens": "30",
    "completion_tokens": "12",
    "total_tokens": "42",
    "cost": "0.000054",
    "cancel_requested_at": f"CASE WHEN g %% 10 = 0 THEN {_AT} + interval '1 s' END",
    "stopped_at": f"CASE WHEN g %% 10 = 0 THEN {_AT} + interval '2 s' END",
    "cancel_source": "CASE WHEN g %% 10 = 0 THEN (ARRAY['api', 'admin', 'cli', 'system'])[1 + (g / 10) %% 4]"
    " ELSE '' END",
    "cancelled_by_name": "CASE WHEN g %% 10 = 0 THEN 'bench' ELSE '' END",
}
STEP_COLUMNS = {
    "run_id": "md5('run' || g)::uuid",
    "sequence": "s",
    "kind": "(ARRAY['request', 'llm', 'tool'])[1 + s %% 3]",
    "round": "s / 3",
    "duration_ms": "1.5",
    "payload": "jsonb_build_object('content', 'the answer to order #' || g, 'usage',"
    " jsonb_build_object('prompt_tokens', 30, 'completion_tokens', 12))",
    "created_at": f"{_AT} + s * interval '0.1 s'",
}


def fill(lo: int, hi: int, *, top: int, steps: int, users: list[int], base: datetime) -> None:
    """Insert runs ``lo``..``hi`` of a history whose run ``top`` is the newest (created at
    ``base``, the others ``SECONDS_APART`` before one another), each with ``steps`` steps.

    Run ``g`` is owned by ``users[g % len(users)]``; every tenth is cancelled (from the API, the
    admin, the CLI or the system in turn), the rest completed; one in twenty ran on
    ``anthropic``, a quarter on ``openai``, the rest on ``scripted``; its prompt is
    ``order #<g> <one of five tasks>``. PostgreSQL only.
    """
    from django.db import connection

    from nrllm_agents.models import AgentRun, AgentRunEvent

    params: dict[str, Any] = {"users": users, "base": base, "top": top, "apart": SECONDS_APART, "lo": lo, "hi": hi}
    for model, columns, series in (
        (AgentRun, RUN_COLUMNS, "generate_series(%(lo)s, %(hi)s) g"),
        (AgentRunEvent, STEP_COLUMNS, "generate_series(%(lo)s, %(hi)s) g, generate_series(0, %(steps)s - 1) s"),
    ):
        if model is AgentRunEvent and steps == 0:
            continue
        columns = {c: v for c, v in columns.items() if c in {f.column for f in model._meta.concrete_fields}}
        fixed = constants(model, set(columns))
        names = [*columns, *fixed]
        values = [*columns.values(), *(f"%(c_{c})s" for c in fixed)]
        sql = f"INSERT INTO {model._meta.db_table} ({', '.join(names)}) SELECT {', '.join(values)} FROM {series}"
        with connection.cursor() as cursor:
            # No triggers (the cancel and step notifications: nobody listens to a fill) and no
            # foreign-key checks (consistent by construction): a tenth of the time.
            cursor.execute("SET session_replication_role = replica")
            try:
                cursor.execute(sql, {**params, "steps": steps, **{f"c_{c}": v for c, v in fixed.items()}})
            finally:
                cursor.execute("SET session_replication_role = origin")


def vacuum() -> None:
    """``VACUUM ANALYZE`` the run and step tables (outside a transaction), as autovacuum would."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE nrllm_agents_agentrun")
        cursor.execute("VACUUM ANALYZE nrllm_agents_agentrunevent")


@contextmanager
def indexes_set_aside(*tables: str) -> Iterator[None]:
    """Drop the plain indexes of ``tables`` (not those of a primary key or unique constraint) and
    build them again on the way out, as ``pg_restore`` does: one sorted build per index costs a
    fraction of a million inserts into each. Inside a transaction a failure leaves them as
    they were; in autocommit, the way out rebuilds them whatever happened.
    """
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT i.indexname, i.indexdef FROM pg_indexes i WHERE i.tablename = ANY(%s)"
            " AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conname = i.indexname)",
            [list(tables)],
        )
        found = cursor.fetchall()
        for name, _ in found:
            cursor.execute(f'DROP INDEX "{name}"')
    try:
        yield
    except BaseException:
        if connection.in_atomic_block:
            raise  # the rollback brings them back
        _build(found)
        raise
    _build(found)


def _build(indexes: list[tuple[str, str]]) -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SET maintenance_work_mem = '256MB'")
        for _, definition in indexes:
            cursor.execute(definition)
        cursor.execute("RESET maintenance_work_mem")
