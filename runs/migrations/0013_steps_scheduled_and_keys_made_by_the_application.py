"""A step is the unit of scheduling: ready runs are taken by priority, then by when they last
became ready (`queued_at`; a run already there is queued from its start). Tool-call attempts
and steering instructions get keys the application makes, so a transaction whose answer was
lost can look for what it wrote. An event's sequence is given as its transaction commits."""

import django.utils.timezone
import runs.kernel.ids
from django.conf import settings
from django.db import migrations, models


def queued_from_start(apps, schema_editor):
    Run = apps.get_model("runs", "Run")
    Run.objects.update(queued_at=models.F("created_at"))


class Migration(migrations.Migration):

    dependencies = [
        ('runs', '0012_unread_key_indexes'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AlterModelOptions(
            name='steeringinstruction',
            options={'ordering': ['created_at', 'id']},
        ),
        migrations.RemoveIndex(
            model_name='run',
            name='run_ready_order',
        ),
        migrations.AddField(
            model_name='run',
            name='queued_at',
            field=models.DateTimeField(default=django.utils.timezone.now),
        ),
        migrations.RunPython(queued_from_start, migrations.RunPython.noop),
        migrations.AlterField(
            model_name='event',
            name='sequence',
            field=models.BigIntegerField(null=True),
        ),
        migrations.AlterField(
            model_name='steeringinstruction',
            name='id',
            field=models.CharField(default=runs.kernel.ids.new_ulid, editable=False, max_length=26, primary_key=True, serialize=False),
        ),
        migrations.AlterField(
            model_name='toolcall',
            name='id',
            field=models.CharField(default=runs.kernel.ids.new_ulid, editable=False, max_length=26, primary_key=True, serialize=False),
        ),
        migrations.AddIndex(
            model_name='run',
            index=models.Index(condition=models.Q(('status__in', ['pending', 'running'])), fields=['-priority', 'queued_at'], name='run_ready_order'),
        ),
    ]
