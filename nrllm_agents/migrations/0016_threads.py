"""Threads: conversations whose runs follow a multitask strategy (nrllm_agents.threads)."""



import django.db.models.deletion
import django.utils.timezone
import uuid
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('nrllm_agents', '0015_cancelled_by_name'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddField(
            model_name='agentrun',
            name='multitask_strategy',
            field=models.CharField(blank=True, choices=[('reject', 'Reject'), ('enqueue', 'Enqueue'), ('interrupt', 'Interrupt'), ('rollback', 'Rollback')], max_length=16),
        ),
        migrations.AddField(
            model_name='agentrun',
            name='rolled_back',
            field=models.BooleanField(default=False),
        ),
        migrations.AddField(
            model_name='agentrun',
            name='thread_position',
            field=models.PositiveIntegerField(blank=True, null=True),
        ),
        migrations.AlterField(
            model_name='agentrun',
            name='termination_reason',
            field=models.CharField(blank=True, choices=[('completed', 'Completed'), ('max_iterations', 'Max Iterations'), ('provider_failed', 'Provider Failed'), ('tool_failed', 'Tool Failed'), ('approval_denied', 'Approval Denied'), ('cancelled', 'Cancelled'), ('deadline_exceeded', 'Deadline Exceeded'), ('budget_exceeded', 'Budget Exceeded'), ('cost_exceeded', 'Cost Exceeded'), ('enqueue_failed', 'Enqueue Failed'), ('invalid_request', 'Invalid Request'), ('retries_exhausted', 'Retries Exhausted'), ('not_retryable', 'Not Retryable'), ('internal_error', 'Internal Error'), ('interrupted_by_message', 'Interrupted By Message')], max_length=32),
        ),
        migrations.CreateModel(
            name='Thread',
            fields=[
                ('id', models.UUIDField(default=uuid.uuid4, editable=False, primary_key=True, serialize=False)),
                ('title', models.CharField(blank=True, max_length=200)),
                ('created_at', models.DateTimeField(auto_now_add=True)),
                ('last_activity_at', models.DateTimeField(default=django.utils.timezone.now)),
                ('owner', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='agent_threads', to=settings.AUTH_USER_MODEL)),
            ],
            options={
                'ordering': ['-last_activity_at'],
            },
        ),
        migrations.AddField(
            model_name='agentrun',
            name='thread',
            field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.CASCADE, related_name='runs', to='nrllm_agents.thread'),
        ),
        migrations.AddConstraint(
            model_name='agentrun',
            constraint=models.UniqueConstraint(fields=('thread', 'thread_position'), name='agentrun_thread_position'),
        ),
        migrations.AddIndex(
            model_name='thread',
            index=models.Index(fields=['owner', '-last_activity_at'], name='thread_owner_activity'),
        ),
        migrations.AddIndex(
            model_name='thread',
            index=models.Index(fields=['last_activity_at'], name='thread_activity'),
        ),
    ]
