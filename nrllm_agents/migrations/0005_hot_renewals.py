"""Renewals as HOT updates: drop the index on ``lease_expires`` (it changes at every step).

The reaper's scans use a partial index on ``status`` over the rows not yet stopped (live
runs and cancelled runs awaiting their acknowledgement), which no renewal touches. On
PostgreSQL the run table also leaves 20 % of each page free (``fillfactor = 80``) so that
a renewed row version fits on its own page, which a HOT update needs.
"""

from django.db import migrations, models


def _fillfactor(value: int):
    def apply(apps, schema_editor) -> None:
        if schema_editor.connection.vendor == "postgresql":
            table = apps.get_model("nrllm_agents", "AgentRun")._meta.db_table
            schema_editor.execute(f"ALTER TABLE {schema_editor.quote_name(table)} SET (fillfactor = {value})")
    return apply


class Migration(migrations.Migration):

    dependencies = [
        ('nrllm_agents', '0004_approve_permission'),
    ]

    operations = [
        migrations.RemoveIndex(
            model_name='agentrun',
            name='agentrun_status_lease',
        ),
        migrations.AddIndex(
            model_name='agentrun',
            index=models.Index(condition=models.Q(('stopped_at__isnull', True)), fields=['status'],
                               name='agentrun_unstopped'),
        ),
        migrations.RunPython(_fillfactor(80), _fillfactor(100), elidable=True),
    ]
