"""Who cancelled, by name: a user's username, or an operator's at a shell (agent_cancel --by)."""

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import migrations, models
from django.db.models import OuterRef, Subquery


def backfill(apps, schema_editor):
    """Runs cancelled before this migration keep naming the user who cancelled them."""
    AgentRun = apps.get_model("nrllm_agents", "AgentRun")
    User = apps.get_model(settings.AUTH_USER_MODEL)
    field = get_user_model().USERNAME_FIELD  # a class attribute: historical models lack it
    AgentRun.objects.filter(cancelled_by__isnull=False).update(
        cancelled_by_name=Subquery(User.objects.filter(pk=OuterRef("cancelled_by_id")).values(field)[:1])
    )


class Migration(migrations.Migration):
    dependencies = [
        ("nrllm_agents", "0012_agents"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddField(
            model_name="agentrun",
            name="cancelled_by_name",
            field=models.CharField(blank=True, max_length=150),
        ),
        migrations.RunPython(backfill, migrations.RunPython.noop),
    ]
