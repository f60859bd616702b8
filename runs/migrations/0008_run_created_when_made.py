import django.utils.timezone
from django.db import migrations, models


class Migration(migrations.Migration):
    """Run.created_at: set when the start makes the run, not stamped when its row is written.
    The column is unchanged (neither has a database default), so no backend rebuilds the
    table for it (SQLite would, for an AlterField)."""

    dependencies = [
        ("runs", "0007_ulid_keys_without_like_indexes"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="run",
                    name="created_at",
                    field=models.DateTimeField(default=django.utils.timezone.now, editable=False),
                ),
            ],
        ),
    ]
