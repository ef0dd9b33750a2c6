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

from ._sql import section

# The text lives with every other trigger in store/sql/notify.sql (its section of this name).
CREATE = section("0008_push_step_notify")
DROP = section("0008_push_step_notify.reverse")


def _on_postgres(sql: str):
    def apply(apps, schema_editor):
        if schema_editor.connection.vendor == "postgresql":
            schema_editor.execute(sql)

    return apply


class Migration(migrations.Migration):

    dependencies = [("nrllm_agents", "0007_limits_and_forks")]

    operations = [migrations.RunPython(_on_postgres(CREATE), _on_postgres(DROP), elidable=False)]
