"""PostgreSQL's `_like` companions of the pause's keys go (as in runs 0007): nothing looks a
pause, its run or its token digest up by prefix."""

from django.db import migrations

DROPPED = [  # (index, table, column)
    ("approvals_pause_id_26250808_like", "approvals_pause", "id"),
    ("approvals_pause_run_id_d8424450_like", "approvals_pause", "run_id"),
    ("approvals_pause_token_digest_c45dd2c9_like", "approvals_pause", "token_digest"),
]


class Migration(migrations.Migration):
    dependencies = [("approvals", "0007_redundant_key_indexes")]

    operations = [
        migrations.RunSQL(
            f"DROP INDEX IF EXISTS {index}",
            f"CREATE INDEX IF NOT EXISTS {index} ON {table} ({column} varchar_pattern_ops)",
        )
        for index, table, column in DROPPED
    ]
