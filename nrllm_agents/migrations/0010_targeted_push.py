"""Push without the global notify lock: a boundary transaction carries no ``NOTIFY``.

Migration ``0008_push_step_notify`` sent ``pg_notify`` from every step's INSERT, and PostgreSQL
serialises the commits of all transactions that notified (one lock, cluster-wide), so every
boundary of every worker committed one at a time. Now:

- ``agentrun.watchers`` counts the processes watching the run (``push.py`` adds and removes
  itself, on its listening connection). The boundary statement returns it; only for a watched
  run does the worker announce the step, after its commit, through its process's one publisher
  (``deltas.py``), which sends what is pending for all runs in one notifying transaction at a
  bounded rate.
- The step trigger is gone. The status trigger announces, on the run's own channel
  ``nrllm_run_<run id hex>`` and only while the run is watched, a run settling (``completed``,
  ``failed``, ``waiting_for_approval``) or a cancel being acknowledged (``stopped_at`` set): once
  per run, not per step.
- The cancel trigger (``0003_cancel_notify``) stays: a cancel is rare, and it must reach every
  process executing the run whoever cancelled.

Nothing on SQLite: there watchers poll.
"""

from importlib import import_module

import django.db.models.deletion
from django.db import migrations, models

from ._sql import section

# The text lives with every other trigger in store/sql/notify.sql (its section of this name).
CREATE = section("0010_targeted_push")
# Back to 0008's triggers (the column goes with the AddField's reversal, after this).
_0008 = import_module("nrllm_agents.migrations.0008_push_step_notify")
DROP = section("0010_targeted_push.reverse") + _0008.CREATE
_on_postgres = _0008._on_postgres


class Migration(migrations.Migration):
    dependencies = [("nrllm_agents", "0009_rate_counters")]

    operations = [
        migrations.AddField(
            model_name="agentrun",
            name="watchers",
            field=models.IntegerField(default=0, db_default=0, editable=False),
        ),
        migrations.RunPython(_on_postgres(CREATE), _on_postgres(DROP), elidable=False),
        # The step's insert writes one index fewer: (run, sequence) already serves lookups by run.
        migrations.AlterField(
            model_name="agentrunevent",
            name="run",
            field=models.ForeignKey(
                db_index=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="events",
                to="nrllm_agents.agentrun",
            ),
        ),
    ]
