"""Indexes that keep the run lists flat at millions of runs (issue 45).

- newest first (``created_at DESC, id DESC``): the admin's list and the API's keyset pages;
- ``provider``, ``termination_reason`` and ``cancel_source`` each followed by ``created_at``: a
  filtered list reads its first page from the index instead of sorting every match;
- on PostgreSQL, a trigram GIN index on ``UPPER(prompt)``: the expression the admin's search and
  the playground's ``icontains`` compare, so a search for words of a prompt reads the index
  instead of every prompt (``pg_trgm`` is a trusted extension since PostgreSQL 13: the
  database owner may create it). SQLite keeps its plain ``LIKE``.

Plain ``CREATE INDEX``: on a big table it blocks writes to runs while it builds (about a minute
per million runs on two cores); ``docs/operations/upgrades.md`` says how to build them
``CONCURRENTLY`` beforehand instead.
"""

from django.db import migrations, models

TRIGRAM_INDEX = "agentrun_prompt_trgm"
# (CREATE EXTENSION by hand rather than contrib.postgres's TrigramExtension: importing that needs
# psycopg, which a SQLite install may not have.)
CREATE_TRIGRAM = (
    "CREATE EXTENSION IF NOT EXISTS pg_trgm;"
    f" CREATE INDEX IF NOT EXISTS {TRIGRAM_INDEX} ON nrllm_agents_agentrun USING gin (UPPER(prompt) gin_trgm_ops)"
)
DROP_TRIGRAM = f"DROP INDEX IF EXISTS {TRIGRAM_INDEX}"


def _on_postgres(sql: str):
    def apply(apps, schema_editor):
        if schema_editor.connection.vendor == "postgresql":
            schema_editor.execute(sql)

    return apply


class Migration(migrations.Migration):

    dependencies = [("nrllm_agents", "0027_retention")]

    operations = [
        migrations.AddIndex(
            model_name="agentrun",
            index=models.Index(fields=["-created_at", "-id"], name="agentrun_created"),
        ),
        migrations.AddIndex(
            model_name="agentrun",
            index=models.Index(fields=["provider", "-created_at"], name="agentrun_provider_created"),
        ),
        migrations.AddIndex(
            model_name="agentrun",
            index=models.Index(fields=["termination_reason", "-created_at"], name="agentrun_reason_created"),
        ),
        migrations.AddIndex(
            model_name="agentrun",
            index=models.Index(
                condition=models.Q(("cancel_source", ""), _negated=True),
                fields=["cancel_source", "-created_at"],
                name="agentrun_cancel_source_created",
            ),
        ),
        migrations.RunPython(_on_postgres(CREATE_TRIGRAM), _on_postgres(DROP_TRIGRAM), elidable=False),
    ]
