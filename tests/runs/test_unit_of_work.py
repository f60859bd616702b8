"""The unit of work on either database: events stand or fall with their own change (a
rolled-back savepoint takes only its own events), and a run's write lands whatever was
read or written before it (no state kept on model instances)."""

import pytest
from django.db import transaction

from runs.application import run_start
from runs.domain import events, push
from runs.domain.transitions import save_run
from runs.models import Event, Run, Tenant
from runs.runtime.lease import lock_run
from runs.runtime.steering import narrate_control

pytestmark = pytest.mark.django_db(transaction=True)  # events.atomic() is durable: never inside a test's transaction


class RolledBack(Exception):
    pass


def test_an_event_in_a_rolled_back_savepoint_is_lost_alone_and_the_others_commit_gap_free(people_tx, monkeypatch):
    """On SQLite the next event takes the id of the one rolled back: it is numbered once,
    after the one before it, and only what committed is pushed."""
    run, _ = run_start(caller=people_tx.caller("alice"), query="count to 2", agent_id="countdown")
    pushed: list[tuple[str, int | None]] = []
    monkeypatch.setattr(
        push, "push", lambda tenant, written: pushed.extend((e.payload["Outcome"], e.sequence) for e, _ in written)
    )
    with events.atomic():
        locked_run = lock_run(run.pk)
        narrate_control(locked_run, events.CONTROL_RECEIVED, "pause", "before")
        with pytest.raises(RolledBack), transaction.atomic():
            narrate_control(locked_run, events.CONTROL_RECEIVED, "pause", "rolled back")
            raise RolledBack
        with transaction.atomic():  # a savepoint that is released keeps its event
            narrate_control(locked_run, events.CONTROL_RECEIVED, "pause", "kept")
        narrate_control(locked_run, events.CONTROL_RECEIVED, "pause", "after")
    written = Event.objects.filter(run=run).order_by("sequence")
    assert [(e.type, e.payload.get("Outcome")) for e in written] == [
        ("task.spawned", None),
        ("control.received", "before"),
        ("control.received", "kept"),
        ("control.received", "after"),
    ]
    assert [e.sequence for e in written] == [1, 2, 3, 4]
    assert Tenant.objects.get(slug="acme").event_sequence == 4
    assert pushed == [("before", 2), ("kept", 3), ("after", 4)]


def test_a_write_back_to_the_value_read_lands_though_the_row_changed_in_between(people_tx):
    """The runtime read the run; meanwhile an ORM write changed its goal; the runtime then
    writes the goal it read: that value is written, not skipped as unchanged."""
    run, _ = run_start(caller=people_tx.caller("alice"), query="count to 2", agent_id="countdown")
    read = Run.objects.get(pk=run.pk)
    Run.objects.filter(pk=run.pk).update(goal="count to 9")
    with events.atomic():
        read.goal = "count to 2"
        save_run(read)
    assert Run.objects.get(pk=run.pk).goal == "count to 2"
    Run.objects.filter(pk=run.pk).update(priority=5)  # and again, with a save() in between
    read.save(update_fields=["goal"])
    with events.atomic():
        save_run(read)
    assert Run.objects.values_list("goal", "priority").get(pk=run.pk) == ("count to 2", 0)
