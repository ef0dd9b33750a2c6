"""Who may use a saved agent or a connection in a run (issue 48, "A team's access"): users and
groups; none named keeps it open to every signed-in user, as before. Reversible: the tables go."""

from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('auth', '0012_alter_user_first_name_max_length'),
        ('nrllm_agents', '0028_list_indexes'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddField(
            model_name='agent',
            name='allowed_groups',
            field=models.ManyToManyField(blank=True, help_text='Members of these groups may use it too.', related_name='+', to='auth.group'),
        ),
        migrations.AddField(
            model_name='agent',
            name='allowed_users',
            field=models.ManyToManyField(blank=True, help_text='Who may use it in a run. Leave both lists empty to let every signed-in user use it.', related_name='+', to=settings.AUTH_USER_MODEL),
        ),
        migrations.AddField(
            model_name='connection',
            name='allowed_groups',
            field=models.ManyToManyField(blank=True, help_text='Members of these groups may use it too.', related_name='+', to='auth.group'),
        ),
        migrations.AddField(
            model_name='connection',
            name='allowed_users',
            field=models.ManyToManyField(blank=True, help_text='Who may use it in a run. Leave both lists empty to let every signed-in user use it.', related_name='+', to=settings.AUTH_USER_MODEL),
        ),
    ]
