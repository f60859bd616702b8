"""Transactions made on rows as they were read, not locked: a worker's on the run as it last
left it (Lease.held_run), an approval on the run and pause it read (lease.guard_as_read).
They land only while the run still stands so, and are made again under the run's lock when
it does not. What moves the run here does so between the read and the write."""

import random
import threading
import time
from collections.abc import Callable
from datetime import timedelta

import pytest
from django.utils import timezone

from approvals.models import Cause, Pause
from bench.common import psycopg_round_trips
from runs.domain import services
from runs.domain.errors import AlreadyResumed
from runs.domain.services import run_start, steering_submit
from runs.models import Event, Run, RunStatus, SteeringInstruction, SteeringState, ToolCall
from runs.runtime import handoff
from runs.runtime.dispatch import drain
from runs.runtime.handoff import carry_handed
from runs.runtime.registry import unregister_agent
from tests.approvals.test_races import in_threads
from tests.conftest import GatedProbe, one_call_agent, requires_postgres


class _Working:
    """Agent `held`: one call of `work`, whose body runs `during` (given the run's id)."""

    def __init__(self) -> None:
        self.bodies = 0
        self.during: Callable[[str], object] = lambda run_id: None

        def work(args, ctx):
            self.bodies += 1
            self.during(ctx.run_id)
            return {"ok": True}

        one_call_agent("held", work)


@pytest.fixture
def working():
    yield _Working()
    unregister_agent("held")


def _completed(run: Run) -> int:
    return Event.objects.filter(run=run, type="tool.completed").count()


@pytest.mark.django_db(transaction=True)
def test_steering_that_arrives_during_the_body_is_applied_after_its_record(people_tx, working):
    """Without the guard the record would land on the row as the worker knew it (no steering
    pending), the planner be asked, and the run end with the pause never applied."""
    operator = people_tx.caller("olivia")
    working.during = lambda run_id: steering_submit(caller=operator, run_id=run_id, method="pause")
    run = run_start(caller=people_tx.caller("alice"), query="work", agent_id="held")[0]
    drain()
    run.refresh_from_db()
    assert run.status == RunStatus.PAUSED and not run.steering_pending
    assert Pause.objects.get(run=run).cause == Cause.OPERATOR
    assert run.checkpoint["step"] == 1 and len(run.checkpoint["history"]) == 1  # the step was recorded
    assert list(ToolCall.objects.filter(run=run).values_list("outcome", flat=True)) == ["completed"]
    working.during = lambda run_id: None
    steering_submit(caller=operator, run_id=run.pk, method="resume")
    drain()
    run.refresh_from_db()
    assert run.status == RunStatus.COMPLETE and working.bodies == 1 and _completed(run) == 1


@pytest.mark.django_db(transaction=True)
def test_a_record_on_a_run_taken_over_during_the_body_lands_nothing(people_tx, working):
    """Another worker took the run (this one's lease lapsed unseen): the record is fenced."""

    def taken_over(run_id: str) -> None:
        later = timezone.now() + timedelta(minutes=5)
        Run.objects.filter(pk=run_id).update(lease_owner="another-worker", lease_expires_at=later)

    working.during = taken_over
    run = run_start(caller=people_tx.caller("alice"), query="work", agent_id="held")[0]
    drain()
    run.refresh_from_db()
    assert run.status == RunStatus.RUNNING and run.lease_owner == "another-worker"
    assert run.checkpoint.get("step", 0) == 0 and not run.checkpoint.get("history")
    assert list(ToolCall.objects.filter(run=run).values_list("outcome", flat=True)) == ["fenced"]
    assert _completed(run) == 0


@requires_postgres
@pytest.mark.django_db(transaction=True)
def test_a_handed_call_carried_at_once_to_the_end_is_one_round_trip(people_tx, monkeypatch):
    """The record with the run's end (an inline planner finishes in it): one statement, its
    own transaction, no BEGIN and no lock taken before it (before, a BEGIN, the run's lock,
    the writes and a COMMIT: four). No read of the run before it: the hand-off goes on from
    the approval's commit. (That statement also says no other run is ready, so a drain
    sends no look after it: test_handoff.)"""
    monkeypatch.setattr(handoff, "FRESH_SECONDS", 60.0)  # carried at once, however slow the machine
    alice = people_tx.caller("alice")
    probe = GatedProbe(inline=True)
    try:
        runs = [run_start(caller=alice, query="launch", agent_id="probe")[0] for _ in range(2)]
        steering_submit(caller=alice, run_id=runs[0].pk, method="approve", payload={})
        drain()  # warm
        steering_submit(caller=alice, run_id=runs[1].pk, method="approve", payload={})
        with psycopg_round_trips() as round_trips:
            assert len(carry_handed()) == 1
    finally:
        unregister_agent("probe")
    assert round_trips.count == 1
    assert Run.objects.get(pk=runs[1].pk).status == RunStatus.COMPLETE
    assert probe.calls == [{"target": "moon"}] * 2


@requires_postgres
@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("attempt", range(5))
def test_race_operator_pause_against_the_record(people_tx, working, attempt):
    """The pause lands before the record, during it, or after it: the body runs once, the step
    is recorded once, and the pause is applied at a boundary or refused on an ended run,
    never left pending."""
    working.during = lambda run_id: time.sleep(random.uniform(0, 0.01))
    run = run_start(caller=people_tx.caller("alice"), query="work", agent_id="held")[0]
    operator = people_tx.caller("olivia")

    def job(i: int) -> object:
        if i == 0:
            return drain()
        time.sleep(random.uniform(0, 0.015))
        return steering_submit(caller=operator, run_id=run.pk, method="pause")

    in_threads(2, job)
    run.refresh_from_db()
    if run.status == RunStatus.PAUSED:
        steering_submit(caller=operator, run_id=run.pk, method="resume")
        drain()
        run.refresh_from_db()
    assert run.status == RunStatus.COMPLETE and not run.steering_pending
    assert working.bodies == 1 and _completed(run) == 1 and len(run.checkpoint["history"]) == 1
    assert not SteeringInstruction.objects.filter(run=run, state=SteeringState.PENDING).exists()


@requires_postgres  # on SQLite the approval's transaction holds the database: nothing moves meanwhile
@pytest.mark.django_db(transaction=True)
def test_an_approval_whose_run_was_cancelled_after_it_was_read_is_refused_as_under_the_lock(
    people_tx, probe, monkeypatch
):
    """The cancel lands between the approval's read and its write: the approval's write is
    refused, and made again under the lock it answers as a decision on a cancelled run
    does. Nothing of the approval landed; the gated body never runs."""
    run = run_start(caller=people_tx.caller("alice"), query="launch", agent_id="probe")[0]
    drain()
    read = services.guard_as_read

    def cancelled_meanwhile(held: Run) -> None:
        read(held)
        cancel = threading.Thread(
            target=lambda: steering_submit(caller=people_tx.caller("alice"), run_id=run.pk, method="cancel")
        )
        cancel.start()
        cancel.join()

    monkeypatch.setattr(services, "guard_as_read", cancelled_meanwhile)
    with pytest.raises(AlreadyResumed):
        steering_submit(caller=people_tx.caller("bob"), run_id=run.pk, method="approve", payload={})
    monkeypatch.undo()
    drain()
    run.refresh_from_db()
    assert run.status == RunStatus.CANCELLED and probe.calls == []
    assert Pause.objects.get(run=run).decision == "cancel"
    assert not ToolCall.objects.filter(run=run).exists()
    assert not Event.objects.filter(run=run, type="tool.approved").exists()
