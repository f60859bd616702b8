"""Keys no read asks for alone lose their index (a person's runs are read within a tenant;
steering and the ledger by run): each was one more index every write kept up to date.
Dropped by Django's names for them rather than by AlterField, which on SQLite would copy
each table whole (as 0005 does)."""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

DROPPED = [  # (index, table, column)
    ("runs_run_owner_id_b1defaec", "runs_run", "owner_id"),
    ("runs_steeringinstruction_actor_id_8420cd4f", "runs_steeringinstruction", "actor_id"),
    ("runs_steeringinstruction_tenant_id_6321046f", "runs_steeringinstruction", "tenant_id"),
    ("runs_toolcall_tenant_id_1e9971bc", "runs_toolcall", "tenant_id"),
]


def unindexed(model: str, name: str, to: str, related_name: str) -> migrations.AlterField:
    return migrations.AlterField(
        model_name=model,
        name=name,
        field=models.ForeignKey(
            db_index=False, on_delete=django.db.models.deletion.PROTECT, related_name=related_name, to=to
        ),
    )


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0011_sign_ins_held_out_of_the_log"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                unindexed("run", "owner", settings.AUTH_USER_MODEL, "runs"),
                unindexed("steeringinstruction", "actor", settings.AUTH_USER_MODEL, "+"),
                unindexed("steeringinstruction", "tenant", "runs.tenant", "+"),
                unindexed("toolcall", "tenant", "runs.tenant", "+"),
            ],
            database_operations=[
                migrations.RunSQL(f"DROP INDEX IF EXISTS {index}", f"CREATE INDEX IF NOT EXISTS {index} ON {table} ({column})")
                for index, table, column in DROPPED
            ],
        ),
    ]
