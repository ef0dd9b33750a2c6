"""PostgreSQL triggers that announce a run's new steps and its final statuses on ``nrllm_step``.

Watchers (the browser stream, ``agent_events --follow``) wait for these instead of polling.
Both are sent from inside the writing transaction, so PostgreSQL delivers them only once it
commits, whichever code path wrote:

- every step appended to the event table: payload ``<run id>:<sequence>``;
- a run becoming ``completed``, ``failed`` or ``waiting_for_approval`` (a settle or suspend
  appends no step): payload ``<run id>:s``. A run becoming ``cancelled`` is already announced
  on ``nrllm_cancel`` (migration ``0003_cancel_notify``), which watchers also listen to.

Nothing on SQLite: there watchers poll.
"""

from django.db import migrations

EVENTS = "nrllm_agents_agentrunevent"
RUNS = "nrllm_agents_agentrun"

CREATE = f"""
CREATE OR REPLACE FUNCTION nrllm_agents_notify_step() RETURNS trigger AS $$
BEGIN
    PERFORM pg_notify('nrllm_step', NEW.run_id::text || ':' || NEW.sequence::text);
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER nrllm_agents_notify_step
    AFTER INSERT ON {EVENTS}
    FOR EACH ROW EXECUTE FUNCTION nrllm_agents_notify_step();

CREATE OR REPLACE FUNCTION nrllm_agents_notify_settled() RETURNS trigger AS $$
BEGIN
    PERFORM pg_notify('nrllm_step', NEW.id::text || ':s');
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER nrllm_agents_notify_settled
    AFTER UPDATE OF status ON {RUNS}
    FOR EACH ROW
    WHEN (NEW.status IN ('completed', 'failed', 'waiting_for_approval')
          AND OLD.status IS DISTINCT FROM NEW.status)
    EXECUTE FUNCTION nrllm_agents_notify_settled();
"""

DROP = f"""
DROP TRIGGER IF EXISTS nrllm_agents_notify_step ON {EVENTS};
DROP FUNCTION IF EXISTS nrllm_agents_notify_step();
DROP TRIGGER IF EXISTS nrllm_agents_notify_settled ON {RUNS};
DROP FUNCTION IF EXISTS nrllm_agents_notify_settled();
"""


def _on_postgres(sql: str):
    def apply(apps, schema_editor):
        if schema_editor.connection.vendor == "postgresql":
            schema_editor.execute(sql)

    return apply


class Migration(migrations.Migration):

    dependencies = [("nrllm_agents", "0007_limits_and_forks")]

    operations = [migrations.RunPython(_on_postgres(CREATE), _on_postgres(DROP), elidable=False)]
