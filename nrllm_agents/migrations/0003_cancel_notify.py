"""A PostgreSQL trigger that announces every transition to ``cancelled`` on ``nrllm_cancel``.

Sent from inside the cancelling transaction, so PostgreSQL delivers it only if that
transaction commits, whichever statement did the cancel (single, bulk, limits, or anything
added later). The payload is the run id. Nothing on SQLite: there the watcher polls.
"""

from django.db import migrations

TABLE = "nrllm_agents_agentrun"

CREATE = f"""
CREATE OR REPLACE FUNCTION nrllm_agents_notify_cancel() RETURNS trigger AS $$
BEGIN
    PERFORM pg_notify('nrllm_cancel', NEW.id::text);
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER nrllm_agents_notify_cancel
    AFTER UPDATE OF status ON {TABLE}
    FOR EACH ROW
    WHEN (NEW.status = 'cancelled' AND OLD.status IS DISTINCT FROM 'cancelled')
    EXECUTE FUNCTION nrllm_agents_notify_cancel();
"""

DROP = f"""
DROP TRIGGER IF EXISTS nrllm_agents_notify_cancel ON {TABLE};
DROP FUNCTION IF EXISTS nrllm_agents_notify_cancel();
"""


def _on_postgres(sql: str):
    def apply(apps, schema_editor):
        if schema_editor.connection.vendor == "postgresql":
            schema_editor.execute(sql)

    return apply


class Migration(migrations.Migration):

    dependencies = [("nrllm_agents", "0002_liveness")]

    operations = [migrations.RunPython(_on_postgres(CREATE), _on_postgres(DROP), elidable=False)]
