"""A remote task's cancel goes through the outbox, against the live travel desk: owed in the
transaction that ends the call, sent once it commits, never for a change that rolled back;
a task already over, or unknown to its agent, needs no cancel."""

import json

import pytest
from a2a.utils.errors import UnsupportedOperationError
from django.db import transaction

import outbox
from approvals.a2a import cancel
from approvals.a2a.models import RemoteAgent
from approvals.domain.services import pause_cancel_open
from approvals.models import Pause
from outbox.models import OutboxMessage, State
from runs.domain import events
from runs.models import Run, RunStatus
from runs.runtime.dispatch import drain
from tests.a2a.helpers import configure, open_pause, payloads, remote, start, steer


class Boom(Exception):
    pass


def parked(people, url: str, query: str = "Book a flight to Tunis") -> tuple[Run, Pause]:
    configure(people, url)
    run = start(people, query)
    drain()
    return run, open_pause(run)


def test_a_cancel_is_owed_in_the_outbox_and_delivered_once(people_tx, travel_desk):
    configure(people_tx, travel_desk.url)
    agent = RemoteAgent.objects.get(name="travel-desk")
    agent.set_auth_header("Bearer desk-secret-7")  # sent to the desk at delivery, never kept in the outbox
    agent.save()
    run, pause = parked(people_tx, travel_desk.url)
    task_id, context_id = pause.payload["RemoteTaskID"], pause.tool_context["a2a"]["context_id"]

    steer(people_tx, run, "cancel", {})
    owed = OutboxMessage.objects.get()
    assert (owed.kind, owed.key, owed.state) == ("a2a.cancel", context_id, State.PENDING)
    assert owed.payload == {
        "tenant": people_tx.acme.pk,
        "agent": "travel-desk",
        "card_url": travel_desk.url,
        "task_id": task_id,
        "context_id": context_id,
    }
    assert "desk-secret-7" not in json.dumps(owed.payload)
    assert remote(travel_desk.url, task_id).state == "input-required"  # nothing sent before delivery

    assert outbox.deliver_due() == 1
    assert remote(travel_desk.url, task_id).state == "canceled"
    owed.refresh_from_db()
    assert (owed.state, owed.attempts) == (State.DELIVERED, 1)

    with transaction.atomic():  # owed again (another path ending the same call): the first stands
        cancel.cancel_remote_on_commit(run.tenant_id, pause.tool_context)
    assert OutboxMessage.objects.count() == 1 and outbox.deliver_due() == 0


def test_a_cancel_in_a_transaction_that_rolls_back_sends_nothing(people_tx, travel_desk):
    run, pause = parked(people_tx, travel_desk.url, "Book a flight to Oslo")
    with pytest.raises(Boom), events.atomic():
        locked = Run.objects.select_for_update(no_key=True).get(pk=run.pk)
        pause_cancel_open(run=locked, reason="changed my mind", cascaded=False)
        raise Boom()
    assert not OutboxMessage.objects.exists() and outbox.deliver_due() == 0
    assert Run.objects.get(pk=run.pk).status == RunStatus.PAUSED
    assert remote(travel_desk.url, pause.payload["RemoteTaskID"]).state == "input-required"


def owe(people, url: str, task_id: str, context_id: str = "") -> None:
    state = {"agent": "travel-desk", "card_url": url, "task_id": task_id, "context_id": context_id}
    cancel.cancel_remote_soon(people.acme.pk, state)


def test_a_task_already_over_or_unknown_to_its_agent_counts_as_delivered(people_tx, travel_desk):
    configure(people_tx, travel_desk.url)
    run = start(people_tx, "Book a flight to Rome, it will fail")
    drain()
    task_id = payloads(run, "tool.failed")[0]["RemoteTaskID"]  # the desk failed it: over
    owe(people_tx, travel_desk.url, task_id)
    owe(people_tx, travel_desk.url, "no-such-task")
    owe(people_tx, travel_desk.url, "", context_id="a-context-nothing-was-sent-in")
    assert outbox.deliver_due() == 3
    assert set(OutboxMessage.objects.values_list("state", "attempts")) == {(State.DELIVERED, 1)}
    assert remote(travel_desk.url, task_id).state == "failed"


def test_an_agent_that_cannot_cancel_leaves_the_message_dead_at_once(people_tx, travel_desk, monkeypatch):
    def refuse(*args, **kwargs):
        raise UnsupportedOperationError("cancel is not supported")

    monkeypatch.setattr(cancel, "cancel_remote_task", refuse)
    configure(people_tx, travel_desk.url)
    owe(people_tx, travel_desk.url, "some-task")
    assert outbox.deliver_due() == 0
    message = OutboxMessage.objects.get()
    assert (message.state, message.attempts) == (State.DEAD, 1)
    assert "cannot cancel" in message.last_error
