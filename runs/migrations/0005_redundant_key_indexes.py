"""Keys that lead a composite index lose their own index: every write kept both, for no
read the composite does not serve. The indexes are dropped by Django's names for them (and
PostgreSQL's `_like` companions of text keys) rather than by AlterField, which on SQLite
would copy each table whole."""

import django.db.models.deletion
from django.db import migrations, models

DROPPED = [  # (index, table, column); no column: a `_like` companion, not made again on the way back
    ("runs_event_run_id_9278d2f7", "runs_event", "run_id"),
    ("runs_event_run_id_9278d2f7_like", "", ""),
    ("runs_event_tenant_id_75d054ac", "runs_event", "tenant_id"),
    ("runs_run_tenant_id_45914888", "runs_run", "tenant_id"),
    ("runs_toolcall_run_id_d2fbb3a3", "runs_toolcall", "run_id"),
    ("runs_toolcall_run_id_d2fbb3a3_like", "", ""),
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
    dependencies = [("runs", "0004_leased_runs_index")]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                unindexed("event", "run", "runs.run", "events"),
                unindexed("event", "tenant", "runs.tenant", "+"),
                unindexed("run", "tenant", "runs.tenant", "runs"),
                unindexed("toolcall", "run", "runs.run", "tool_calls"),
            ],
            database_operations=[
                migrations.RunSQL(
                    f"DROP INDEX IF EXISTS {index}",
                    f"CREATE INDEX IF NOT EXISTS {index} ON {table} ({column})" if column else migrations.RunSQL.noop,
                )
                for index, table, column in DROPPED
            ],
        ),
    ]
