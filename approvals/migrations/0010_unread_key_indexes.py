"""The decider alone is read by no one: its index goes (as runs 0012's do)."""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("approvals", "0009_sign_ins_sealed_at_rest"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="pause",
                    name="decided_by",
                    field=models.ForeignKey(
                        blank=True,
                        db_index=False,
                        null=True,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="+",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
            ],
            database_operations=[
                migrations.RunSQL(
                    "DROP INDEX IF EXISTS approvals_pause_decided_by_id_b68393cf",
                    "CREATE INDEX IF NOT EXISTS approvals_pause_decided_by_id_b68393cf ON approvals_pause (decided_by_id)",
                )
            ],
        ),
    ]
