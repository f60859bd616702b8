"""The dispatcher's look costs what is ready and leased, not the history of ended runs: on
PostgreSQL its plan walks the partial indexes, never the whole table, even before the table
has statistics (a young database, or autovacuum off)."""

from django.db import connection
from django.utils import timezone

from runs.domain import sql
from runs.models import Run, RunStatus
from runs.runtime.dispatch import ready_ids
from tests.conftest import requires_postgres


def _ended_history(people, count: int) -> None:
    owner = people.caller("alice").user
    Run.objects.bulk_create(
        Run(tenant=people.acme, owner=owner, session="s1", agent_id="probe", goal="g", status=RunStatus.COMPLETE)
        for _ in range(count)
    )


@requires_postgres
def test_the_ready_look_walks_indexes_not_the_history(people):
    _ended_history(people, 5000)
    ready = Run.objects.create(
        tenant=people.acme, owner=people.caller("alice").user, session="s1", agent_id="probe", goal="g"
    )
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN {sql.READY}", sql.ready_parameters(timezone.now(), 3, 20))
        plan = "\n".join(line for (line,) in cursor.fetchall())
    assert "Seq Scan" not in plan, plan
    assert "run_ready_order" in plan and "run_leased" in plan, plan
    assert ready_ids() == [ready.pk]
