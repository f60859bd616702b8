"""Statements per pause + decide cycle, pinned so a regression fails CI (timing lives in
bin/bench, not in tests)."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from runs.domain.services import run_start, steering_submit
from runs.runtime.dispatch import drain
from runs.runtime.registry import unregister_agent
from tests.conftest import GatedProbe

# One run of a one-gate agent: start, advance to the gate, approve, advance to the end.
# 47 today on SQLite, 41 on PostgreSQL (BEGIN and COMMIT counted, savepoints not; the two
# callers resolved included); 2 more when earlier tests left live handles for drain() to reap.
CYCLE_CEILING = 49
# The same with an inline planner, whose first step is taken in the start's transaction:
# 28 today on SQLite, 25 on PostgreSQL.
INLINE_CYCLE_CEILING = 30


def cycle(people) -> None:
    run, _ = run_start(caller=people.caller("alice"), query="launch", agent_id="probe")
    drain()
    steering_submit(caller=people.caller("alice"), run_id=run.pk, method="approve", payload={})
    drain()


# Transactional: the approval's commit is the database's own, so it hands the run to this
# process's worker (runs.runtime.handoff), as in the embedded default.
@pytest.mark.django_db(transaction=True)
def test_statements_per_pause_and_decide_cycle(people_tx, probe):
    people = people_tx
    cycle(people)  # warm the caches a long-lived process has
    with CaptureQueriesContext(connection) as queries:
        cycle(people)
    statements = [q["sql"] for q in queries.captured_queries if not q["sql"].startswith(("SAVEPOINT", "RELEASE"))]
    assert probe.calls == [{"target": "moon"}] * 2
    assert len(statements) <= CYCLE_CEILING, len(statements)


@pytest.mark.django_db(transaction=True)
def test_statements_per_cycle_of_an_inline_planner(people_tx):
    people = people_tx
    probe = GatedProbe(inline=True)
    try:
        cycle(people)
        with CaptureQueriesContext(connection) as queries:
            cycle(people)
    finally:
        unregister_agent("probe")
    statements = [q["sql"] for q in queries.captured_queries if not q["sql"].startswith(("SAVEPOINT", "RELEASE"))]
    assert probe.calls == [{"target": "moon"}] * 2
    assert len(statements) <= INLINE_CYCLE_CEILING, len(statements)
