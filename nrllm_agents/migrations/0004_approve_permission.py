"""The dedicated permission to approve or deny another user's gated tool calls."""

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ('nrllm_agents', '0003_cancel_notify'),
    ]

    operations = [
        migrations.AlterModelOptions(
            name='agentrun',
            options={'ordering': ['-created_at'],
                     'permissions': [('cancel_agentrun', 'Can cancel agent runs'),
                                     ('approve_agentrun', "Can approve or deny agent runs' gated tool calls")]},
        ),
    ]
