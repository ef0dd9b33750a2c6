"""Rate limit counters (admission.rates): one row per caller, action and window."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('nrllm_agents', '0008_push_step_notify'),
    ]

    operations = [
        migrations.CreateModel(
            name='RateCounter',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('scope', models.CharField(max_length=64)),
                ('ident', models.CharField(max_length=128)),
                ('period', models.BigIntegerField()),
                ('count', models.PositiveIntegerField(default=0)),
            ],
            options={
                'indexes': [models.Index(fields=['scope', 'period'], name='nrllm_rate_prune')],
                'constraints': [models.UniqueConstraint(fields=('scope', 'ident', 'period'), name='nrllm_rate_window')],
            },
        ),
    ]
