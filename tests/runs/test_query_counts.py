"""Statements per pause + decide cycle, pinned so a regression fails CI (timing lives in
bin/bench, not in tests)."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from approvals.models import Pause, PauseState
from bench.common import psycopg_round_trips
from runs.domain.services import run_start, steering_submit
from runs.models import Event, Run, RunStatus, ToolCall
from runs.runtime.dispatch import drain
from runs.runtime.registry import unregister_agent
from tests.conftest import GatedProbe, requires_postgres

# One run of a one-gate agent: start, advance to the gate, approve, advance to the end.
# 35 today on SQLite, 20 on PostgreSQL (BEGIN and COMMIT as Django logs them, counted,
# savepoints not; the two callers resolved included); 2 more when earlier tests left live
# handles for drain() to reap.
CYCLE_CEILING = {"sqlite": 37, "postgresql": 22}
# The same with an inline planner, whose first step is taken in the start's transaction:
# 25 today on SQLite, 14 on PostgreSQL.
INLINE_CYCLE_CEILING = {"sqlite": 27, "postgresql": 16}


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
    assert len(statements) <= CYCLE_CEILING[connection.vendor], len(statements)


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
    assert len(statements) <= INLINE_CYCLE_CEILING[connection.vendor], len(statements)


@requires_postgres
@pytest.mark.django_db(transaction=True)
def test_an_inline_start_that_parks_is_one_round_trip(people_tx):
    """Its writes (the run, its pause, their events) ride in one statement, which is the
    whole transaction: no BEGIN or COMMIT of its own. Counted as psycopg's waits for the
    server's answer, whatever Django's statement log shows."""
    alice = people_tx.caller("alice")
    probe = GatedProbe(inline=True)
    try:
        run_start(caller=alice, query="launch", agent_id="probe")  # warm
        with psycopg_round_trips() as round_trips:
            run, _ = run_start(caller=alice, query="launch", agent_id="probe")
    finally:
        unregister_agent("probe")
    assert round_trips.count == 1
    assert probe.calls == []
    assert Run.objects.get(pk=run.pk).status == RunStatus.PAUSED
    assert Pause.objects.filter(run=run, state=PauseState.PAUSED).count() == 1
    assert Event.objects.filter(run=run, type="pause.requested").count() == 1


@requires_postgres
@pytest.mark.django_db(transaction=True)
def test_a_start_handed_to_a_worker_is_one_round_trip(people_tx, probe):
    """The start's writes, the lease with them, go as one statement, no BEGIN or COMMIT of
    their own: the run is inserted only while its tenant is under its share of workers,
    read in that statement (lease.ShareHeld)."""
    alice = people_tx.caller("alice")
    run_start(caller=alice, query="launch", agent_id="probe")  # warm
    drain()
    with psycopg_round_trips() as round_trips:
        run, _ = run_start(caller=alice, query="launch", agent_id="probe")
    started = Run.objects.get(pk=run.pk)
    assert round_trips.count == 1
    assert started.status == RunStatus.RUNNING and started.lease_owner != ""
    assert Event.objects.filter(run=run, type="task.started").count() == 1
    drain()
    assert Run.objects.get(pk=run.pk).status == RunStatus.PAUSED


@requires_postgres
@pytest.mark.django_db(transaction=True)
def test_an_approval_that_hands_the_run_on_is_two_round_trips(people_tx, probe):
    """The run read with its tenant's share of workers and its pause beside it, and one
    statement with every write (the claim, the attempt it opens, the decision, the audit
    row, the events), its own transaction: the run's write guarded by what was read
    (runs.runtime.lease.guard_as_read), the pause's settle by its state. No BEGIN, no
    COMMIT, no lock before the writes (five round trips under the locks)."""
    alice = people_tx.caller("alice")
    runs = []
    for _ in range(2):  # the first warms what a long-lived process has
        run, _ = run_start(caller=alice, query="launch", agent_id="probe")
        drain()
        runs.append(run)
    steering_submit(caller=alice, run_id=runs[0].pk, method="approve", payload={})
    drain()
    with psycopg_round_trips() as round_trips:
        steering_submit(caller=alice, run_id=runs[1].pk, method="approve", payload={})
    handed = Run.objects.get(pk=runs[1].pk)
    attempt = ToolCall.objects.get(run=handed)
    drain()
    assert round_trips.count == 2
    assert handed.lease_owner == attempt.worker and handed.checkpoint["pending_call"]["attempts"] == 1
    assert (attempt.attempt, attempt.outcome) == (1, "running")
    assert probe.calls == [{"target": "moon"}] * 2
    assert ToolCall.objects.get(pk=attempt.pk).outcome == "completed"
