"""Pause.tenant leads four composite indexes and loses its own (as in runs 0005)."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("approvals", "0006_oauth_sources_credentials_flows")]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="pause",
                    name="tenant",
                    field=models.ForeignKey(
                        db_index=False, on_delete=django.db.models.deletion.PROTECT, related_name="+", to="runs.tenant"
                    ),
                ),
            ],
            database_operations=[
                migrations.RunSQL(
                    "DROP INDEX IF EXISTS approvals_pause_tenant_id_5b766e63",
                    "CREATE INDEX IF NOT EXISTS approvals_pause_tenant_id_5b766e63 ON approvals_pause (tenant_id)",
                )
            ],
        ),
    ]
