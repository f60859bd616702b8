"""PostgreSQL's `_like` companions of ULID keys go: nothing looks an id up by prefix, and every
insert and every status change of a run (not a HOT update) wrote each of them. SQLite never
had them."""

from django.db import migrations

DROPPED = [  # (index, table, column)
    ("runs_run_id_b8683289_like", "runs_run", "id"),
    ("runs_run_parent_id_8594b290_like", "runs_run", "parent_id"),
    ("runs_steeringinstruction_run_id_e02649e4_like", "runs_steeringinstruction", "run_id"),
]


class Migration(migrations.Migration):
    dependencies = [("runs", "0006_ready_runs_index")]

    operations = [
        migrations.RunSQL(
            f"DROP INDEX IF EXISTS {index}",
            f"CREATE INDEX IF NOT EXISTS {index} ON {table} ({column} varchar_pattern_ops)",
        )
        for index, table, column in DROPPED
    ]
