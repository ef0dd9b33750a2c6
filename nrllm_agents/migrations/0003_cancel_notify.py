"""A PostgreSQL trigger that announces every transition to ``cancelled`` on ``nrllm_cancel``.

Sent from inside the cancelling transaction, so PostgreSQL delivers it only if that
transaction commits, whichever statement did the cancel (single, bulk, limits, or anything
added later). The payload is the run id. Nothing on SQLite: there the watcher polls.
"""

from django.db import migrations

from ._sql import section

# The text lives with every other trigger in store/sql/notify.sql (its section of this name).
CREATE = section("0003_cancel_notify")
DROP = section("0003_cancel_notify.reverse")


def _on_postgres(sql: str):
    def apply(apps, schema_editor):
        if schema_editor.connection.vendor == "postgresql":
            schema_editor.execute(sql)

    return apply


class Migration(migrations.Migration):

    dependencies = [("nrllm_agents", "0002_liveness")]

    operations = [migrations.RunPython(_on_postgres(CREATE), _on_postgres(DROP), elidable=False)]
