"""The trace context a run continues (W3C ``traceparent``): a nullable column, no data moved."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("nrllm_agents", "0017_cancel_source_labels")]

    operations = [
        migrations.AddField(
            model_name="agentrun",
            name="trace_context",
            field=models.JSONField(blank=True, null=True),
        ),
    ]
