"""Shared steps of the A2A tests: configure the desk for a tenant, start and steer `trip`
runs, and read what the remote agent itself holds."""

import threading

from django.db import connection

from approvals.a2a import bridge, wire
from approvals.a2a.directory import RemoteAgent as Address
from approvals.a2a.models import RemoteAgent
from approvals.models import Pause
from runs.application import run_start, steering_submit
from runs.domain.events import envelope
from runs.models import Event, Run
from runs.runtime.dispatch import drain


def configure(people, url: str, name: str = "travel-desk") -> None:
    RemoteAgent.objects.update_or_create(tenant=people.acme, name=name, defaults={"card_url": url})


def start(people, query: str, who: str = "alice") -> Run:
    return run_start(caller=people.caller(who), query=query, agent_id="trip")[0]


def steer(people, run: Run, method: str, payload: dict | None = None, who: str = "alice") -> None:
    steering_submit(caller=people.caller(who), run_id=run.pk, method=method, payload=payload)


def payloads(run: Run, type_: str) -> list[dict]:
    """The payloads as the wire carries them (tokens filled in from the sealed copy)."""
    return [envelope(event)["payload"] for event in Event.objects.filter(run=run, type=type_).order_by("sequence")]


def open_pause(run: Run) -> Pause:
    return Pause.objects.get(run=run, state="paused")


def remote(url: str, task_id: str) -> wire.RemoteTask:
    """The remote task as the travel desk holds it, read by a client of its own."""
    return bridge.call(wire.get(Address(name="check", card_url=url), task_id))


def drain_on_another_worker() -> threading.Thread:
    """drain() on a thread of its own, as another worker would (its connection closed after)."""

    def work() -> None:
        try:
            drain()
        finally:
            connection.close()

    worker = threading.Thread(target=work, daemon=True)
    worker.start()
    return worker
