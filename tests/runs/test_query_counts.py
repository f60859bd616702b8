"""Statements per pause + decide cycle, pinned so a regression fails CI (timing lives in
bin/bench, not in tests)."""

from django.db import connection
from django.test.utils import CaptureQueriesContext

from runs.domain.services import run_start, steering_submit
from runs.runtime.dispatch import drain
from runs.runtime.registry import unregister_agent
from tests.conftest import GatedProbe

# One run of a one-gate agent: start, advance to the gate, approve, advance to the end.
# 38 today on SQLite, 31 on PostgreSQL (savepoints not counted; the two callers resolved
# included); 2 more when earlier tests left live handles for drain() to reap.
CYCLE_CEILING = 40
# The same with an inline planner, whose first step is taken in the start's transaction:
# 25 today on SQLite, 21 on PostgreSQL.
INLINE_CYCLE_CEILING = 27


def cycle(people) -> None:
    run, _ = run_start(caller=people.caller("alice"), query="launch", agent_id="probe")
    drain()
    steering_submit(caller=people.caller("alice"), run_id=run.pk, method="approve", payload={})
    drain()


def test_statements_per_pause_and_decide_cycle(people, probe):
    cycle(people)  # warm the caches a long-lived process has
    with CaptureQueriesContext(connection) as queries:
        cycle(people)
    statements = [q["sql"] for q in queries.captured_queries if not q["sql"].startswith(("SAVEPOINT", "RELEASE"))]
    assert probe.calls == [{"target": "moon"}] * 2
    assert len(statements) <= CYCLE_CEILING, len(statements)


def test_statements_per_cycle_of_an_inline_planner(people):
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
