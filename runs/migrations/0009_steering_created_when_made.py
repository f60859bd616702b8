import django.utils.timezone
from django.db import migrations, models


class Migration(migrations.Migration):
    """SteeringInstruction.created_at: set when the service makes the instruction, with the
    same clock reading as its settled_at when it applies at once (stamped as its row was
    written, it came after). The column is unchanged, so no backend rebuilds the table."""

    dependencies = [
        ("runs", "0008_run_created_when_made"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="steeringinstruction",
                    name="created_at",
                    field=models.DateTimeField(default=django.utils.timezone.now, editable=False),
                ),
            ],
        ),
    ]
