"""The outbox table, with its one index: the due pending messages, in order."""

import django.utils.timezone
import runs.kernel.ids
from django.db import migrations, models


class Migration(migrations.Migration):

    initial = True

    dependencies = [
    ]

    operations = [
        migrations.CreateModel(
            name='OutboxMessage',
            fields=[
                ('id', models.CharField(default=runs.kernel.ids.new_ulid, editable=False, max_length=26, primary_key=True, serialize=False)),
                ('kind', models.CharField(help_text='Which handler delivers it.', max_length=64)),
                ('key', models.CharField(help_text='Idempotency key: one message per kind and key, handed to every attempt.', max_length=200)),
                ('payload', models.JSONField(blank=True, default=dict)),
                ('state', models.CharField(choices=[('pending', 'Pending'), ('delivered', 'Delivered'), ('dead', 'Dead')], default='pending', max_length=16)),
                ('attempts', models.PositiveIntegerField(default=0)),
                ('next_attempt_at', models.DateTimeField(default=django.utils.timezone.now)),
                ('last_error', models.CharField(blank=True, default='', max_length=2000)),
                ('created_at', models.DateTimeField(default=django.utils.timezone.now, editable=False)),
                ('delivered_at', models.DateTimeField(blank=True, null=True)),
            ],
            options={
                'indexes': [models.Index(condition=models.Q(('state', 'pending')), fields=['next_attempt_at', 'id'], name='outbox_due')],
                'constraints': [models.UniqueConstraint(fields=('kind', 'key'), name='outbox_kind_key')],
            },
        ),
    ]
