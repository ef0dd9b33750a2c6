"""The Agent Protocol's metadata on threads and runs, and its deletions (a flag, never a row
gone): nullable-free columns with defaults, no data moved."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("nrllm_agents", "0019_times_in_order")]

    operations = [
        migrations.AddField(
            model_name="thread", name="metadata", field=models.JSONField(blank=True, default=dict)
        ),
        migrations.AddField(
            model_name="thread", name="hidden_from_protocol", field=models.BooleanField(default=False)
        ),
        migrations.AddField(
            model_name="agentrun", name="metadata", field=models.JSONField(blank=True, default=dict)
        ),
        migrations.AddField(
            model_name="agentrun", name="hidden_from_protocol", field=models.BooleanField(default=False)
        ),
    ]
