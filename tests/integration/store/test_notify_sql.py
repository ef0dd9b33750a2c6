"""Every PostgreSQL trigger lives in ``store/sql/notify.sql``, and the migrated schema is its text.

The migrations read their SQL from that file; these tests show that the triggers a migrated
database holds are exactly what the file's current sections create (re-applied inside a
transaction that is rolled back), and that no trigger of the app lives anywhere else.
"""

from __future__ import annotations

from importlib import import_module

import pytest
from django.db import connection, transaction

from nrllm_agents.migrations import _sql

pytestmark = [pytest.mark.postgres_only, pytest.mark.django_db]

# The triggers in force and the sections that create them (0010's also drops 0008's step trigger).
CURRENT = {
    "nrllm_agents_notify_cancel": ("0003_cancel_notify.reverse", "0003_cancel_notify"),
    "nrllm_agents_notify_settled": ("0010_targeted_push.reverse", "0010_targeted_push"),
}

DEFINITIONS = """
SELECT t.tgname, pg_get_triggerdef(t.oid), pg_get_functiondef(t.tgfoid)
FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
WHERE NOT t.tgisinternal AND c.relname LIKE 'nrllm_agents_%'
ORDER BY t.tgname
"""


def definitions() -> dict[str, tuple[str, str]]:
    with connection.cursor() as cursor:
        cursor.execute(DEFINITIONS)
        return {name: (trigger, function) for name, trigger, function in cursor.fetchall()}


def test_the_migrated_triggers_are_the_files_current_sections() -> None:
    migrated = definitions()
    assert set(migrated) == set(CURRENT), "a trigger outside store/sql/notify.sql, or one missing"
    with transaction.atomic():
        for name, (drop, create) in CURRENT.items():
            with connection.cursor() as cursor:
                cursor.execute(_sql.section(drop))
            assert name not in definitions()
            with connection.cursor() as cursor:
                cursor.execute(_sql.section(create))
        applied = definitions()
        transaction.set_rollback(True)
    assert applied == migrated
    assert definitions() == migrated


@pytest.mark.parametrize("migration", ["0003_cancel_notify", "0008_push_step_notify", "0010_targeted_push"])
def test_each_trigger_migration_applies_its_section_of_the_file(migration: str) -> None:
    module = import_module(f"nrllm_agents.migrations.{migration}")
    assert module.CREATE == _sql.section(migration)
    assert module.DROP.startswith(_sql.section(f"{migration}.reverse"))


def test_a_missing_section_is_named(tmp_path) -> None:
    sql = tmp_path / "notify.sql"
    sql.write_text("-- section: a\nSELECT 1;\n-- ==== heading\n-- comment outside\n-- section: b\nSELECT 2;\n")
    assert _sql.sections(sql) == {"a": "SELECT 1;\n", "b": "SELECT 2;\n"}
    with pytest.raises(KeyError, match="no section 'nope'"):
        _sql.section("nope")
