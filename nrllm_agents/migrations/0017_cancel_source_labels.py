"""The cancel sources' labels (``CLI``, ``API``, ``system (a limit)``): choices only, no SQL."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("nrllm_agents", "0016_threads")]

    operations = [
        migrations.AlterField(
            model_name="agentrun",
            name="cancel_source",
            field=models.CharField(
                blank=True,
                choices=[
                    ("admin", "admin"),
                    ("cli", "CLI"),
                    ("api", "API"),
                    ("playground", "playground"),
                    ("system", "system (a limit)"),
                ],
                max_length=16,
            ),
        ),
    ]
