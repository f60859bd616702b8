"""Remote calls in flight are bounded per tenant and per agent host, across workers: a step
that finds the bound full gives its worker back (its attempt deferred) instead of waiting
on it, and runs its call again once a slot is free; other tenants' and other hosts' calls go
on meanwhile."""

import threading
import time

import pytest
from django.utils import timezone

from approvals.a2a import slots
from approvals.a2a.models import RemoteAgent, RemoteCallSlot
from runs.models import Run, RunStatus, ToolCall
from runs.runtime.dispatch import drain
from tests.a2a.helpers import drain_on_another_worker, open_pause, start, steer
from tests.a2a.hostile import HostilePeer, trickle


def configure(tenant, url: str) -> None:
    RemoteAgent.objects.update_or_create(tenant=tenant, name="travel-desk", defaults={"card_url": url})


def ledger(run: Run) -> list[tuple[int, int, str]]:
    return list(ToolCall.objects.filter(run=run).order_by("step", "attempt").values_list("step", "attempt", "outcome"))


def held_by_a_trickling_call(people, peer: HostilePeer) -> tuple[Run, threading.Thread]:
    """A run of acme whose call to `peer` is in flight on another worker, for minutes."""
    run = start(people, "Book a flight to Lisbon")
    worker = drain_on_another_worker()
    deadline = time.monotonic() + 10
    while "ListTasks" not in peer.methods():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    return run, worker


def ended(people, run: Run, worker: threading.Thread) -> None:
    steer(people, run, "cancel", {"hard": True})
    worker.join(10)
    assert not worker.is_alive()


@pytest.fixture
def slow_calls(settings):
    settings.HARBOR_A2A_CALL_SECONDS = 300
    return settings


def test_a_tenant_at_its_bound_defers_its_next_call_and_gives_its_worker_back(people_tx, slow_calls, travel_desk):
    slow_calls.HARBOR_A2A_MAX_CALLS_PER_TENANT = 1
    with HostilePeer(lambda method, params: trickle()) as peer:
        configure(people_tx.acme, peer.url)
        first, worker = held_by_a_trickling_call(people_tx, peer)
        assert slots.in_flight(f"tenant:{people_tx.acme.pk}") == 1

        RemoteAgent.objects.filter(tenant=people_tx.acme).update(card_url=travel_desk.url)  # another host
        second = start(people_tx, "Book a flight to Oslo")
        configure(people_tx.globex, travel_desk.url)
        other = start(people_tx, "Book a flight to Rome", who="gina")
        began = time.monotonic()
        drain(limit=2)  # one step of each: neither waits for the trickling call
        assert time.monotonic() - began < 5

        second.refresh_from_db()
        assert second.status == RunStatus.RUNNING and second.lease_owner == ""  # its worker given back
        assert second.queued_at > timezone.now()  # put off: not taken again at once, for ever
        assert ledger(second) == [(0, 1, "deferred")]
        assert "1 remote call(s) already in flight for tenant" in ToolCall.objects.get(run=second).error
        assert open_pause(other).payload["Question"] == "Which date do you want to fly?"  # globex went on

        ended(people_tx, first, worker)
    assert slots.in_flight(f"tenant:{people_tx.acme.pk}") == 0  # the interrupted call gave its slot back
    time.sleep(max(0.0, (second.queued_at - timezone.now()).total_seconds()))
    drain()
    assert open_pause(second).payload["Question"] == "Which date do you want to fly?"
    assert ledger(second) == [(0, 1, "deferred"), (0, 2, "paused")]


def test_an_agent_host_at_its_bound_defers_calls_to_it_from_any_tenant(people_tx, slow_calls):
    slow_calls.HARBOR_A2A_MAX_CALLS_PER_PEER = 1
    with HostilePeer(lambda method, params: trickle()) as peer:
        configure(people_tx.acme, peer.url)
        first, worker = held_by_a_trickling_call(people_tx, peer)
        configure(people_tx.globex, peer.url)
        other = start(people_tx, "Book a flight to Rome", who="gina")
        drain(limit=1)
        assert ledger(other) == [(0, 1, "deferred")]
        assert "already in flight for peer 127.0.0.1:" in ToolCall.objects.get(run=other).error
        assert peer.methods() == ["ListTasks"]  # the deferred call never reached the agent
        steer(people_tx, other, "cancel", {}, who="gina")  # else it would take the freed slot, for minutes
        ended(people_tx, first, worker)
    other.refresh_from_db()
    assert other.status == RunStatus.CANCELLED


def test_a_slot_whose_holder_died_lapses(people_tx, settings):
    settings.HARBOR_A2A_MAX_CALLS_PER_TENANT = 1
    bounds = {"tenant:1": 1}
    slots.take(bounds)  # its holder dies without giving it back
    with pytest.raises(slots.NoFreeSlot):
        slots.take(bounds)
    RemoteCallSlot.objects.update(expires_at=timezone.now())  # its lapse has passed
    assert slots.take(bounds)
