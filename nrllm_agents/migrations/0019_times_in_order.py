"""A run's times in order: ``created_at <= started_at <= stopped_at <= finished_at``.

Interactive runs were stamped ``started_at`` a moment before the insert set ``created_at``, and a
cancelled running run kept the cancel's time as ``finished_at`` though it stopped later. Rows
written so are moved forward to the time before them (never back), then the constraint holds.
"""

from __future__ import annotations

from typing import Any

import django.db.models.functions.comparison
import django.utils.timezone
from django.db import migrations, models
from django.db.models import F
from django.db.models.functions import Coalesce, Greatest


def put_in_order(apps: Any, schema_editor: Any) -> None:
    runs = apps.get_model("nrllm_agents", "AgentRun").objects.using(schema_editor.connection.alias)
    runs.filter(started_at__lt=F("created_at")).update(started_at=F("created_at"))
    after_start = Coalesce(F("started_at"), F("created_at"))
    runs.filter(stopped_at__lt=after_start).update(stopped_at=after_start)
    after_stop = Coalesce(F("stopped_at"), F("started_at"), F("created_at"))
    runs.filter(finished_at__lt=after_stop).update(finished_at=Greatest(F("finished_at"), after_stop))


class Migration(migrations.Migration):
    dependencies = [
        ("nrllm_agents", "0018_trace_context"),
    ]

    operations = [
        migrations.AlterField(
            model_name="agentrun",
            name="created_at",
            field=models.DateTimeField(default=django.utils.timezone.now, editable=False),
        ),
        migrations.RunPython(put_in_order, migrations.RunPython.noop, elidable=True),
        migrations.AddConstraint(
            model_name="agentrun",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    models.Q(
                        ("started_at__isnull", True), ("started_at__gte", models.F("created_at")), _connector="OR"
                    ),
                    models.Q(
                        ("stopped_at__isnull", True),
                        ("stopped_at__gte", django.db.models.functions.comparison.Coalesce("started_at", "created_at")),
                        _connector="OR",
                    ),
                    models.Q(
                        ("finished_at__isnull", True),
                        (
                            "finished_at__gte",
                            django.db.models.functions.comparison.Coalesce("stopped_at", "started_at", "created_at"),
                        ),
                        _connector="OR",
                    ),
                ),
                name="agentrun_times_in_order",
                violation_error_message="a run's times must be in order: created <= started <= stopped <= finished",
            ),
        ),
    ]
