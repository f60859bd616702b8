"""A step is the unit of scheduling: between steps a run gives its worker back, ready steps are
taken by priority and then by how long they have waited, and a tenant's share of workers
counts steps in flight. Driven by the embedded default's own worker pool (threads), as
`bin/run` serves it."""

import time
from collections.abc import Callable, Iterator

import pytest

from approvals.models import Pause
from runs.application import run_start, steering_submit
from runs.models import Event, Run, RunStatus
from runs.runtime import dispatch

pytestmark = pytest.mark.django_db(transaction=True)


def embedded_pool(settings, workers: int) -> Iterator[dispatch._LocalPool]:
    settings.HARBOR_EXECUTOR = "thread"
    settings.HARBOR_LOCAL_WORKERS, settings.HARBOR_TENANT_MAX_RUNNING = workers, max(1, workers - 1)
    settings.HARBOR_TICK_SECONDS = 0.5
    running = dispatch._LocalPool(workers, interval=0.2)
    dispatch.register_wakers()
    original, dispatch._local = dispatch._local, running
    running.start()
    yield running
    running.stop()
    dispatch._local = original


@pytest.fixture
def pool(settings):
    """The embedded pool, four workers and a tenant share of three, as the embedded default."""
    yield from embedded_pool(settings, 4)


@pytest.fixture
def one_worker(settings):
    """One worker: which step it takes next is the queue's order alone (with several, workers
    claiming at the same instant may overshoot a tenant's share, which is soft)."""
    yield from embedded_pool(settings, 1)


def waited_for(condition: Callable[[], bool], seconds: float) -> float:
    """How long `condition` took to hold (fails past `seconds`)."""
    began = time.monotonic()
    while not condition():
        assert time.monotonic() - began < seconds, "not within the time allowed"
        time.sleep(0.02)
    return time.monotonic() - began


def ticks(run: Run) -> int:
    return Event.objects.filter(run=run, type="tool.completed").count()


def test_a_deploy_reaches_its_gate_while_three_long_runs_of_its_tenant_tick(people_tx, pool):
    alice = people_tx.caller("alice")
    countdowns = [run_start(caller=alice, query="count to 40", agent_id="countdown")[0] for _ in range(3)]
    waited_for(lambda: all(ticks(run) >= 1 for run in countdowns), seconds=10)

    deploy, _ = run_start(caller=alice, query="deploy build 7 to production", agent_id="deploy")
    took = waited_for(lambda: Pause.objects.filter(run=deploy, state="paused").exists(), seconds=5)
    assert took < 1.5, f"the deploy waited {took:.2f} s for a worker"
    progress = [ticks(run) for run in countdowns]
    waited_for(lambda: all(ticks(run) > seen for run, seen in zip(countdowns, progress, strict=True)), seconds=5)

    for run in countdowns:
        steering_submit(caller=alice, run_id=run.pk, method="cancel", payload={"hard": True})
    waited_for(lambda: Run.objects.filter(status=RunStatus.RUNNING).count() == 0, seconds=5)


def test_prioritize_reorders_the_steps_waiting(people_tx, one_worker):
    """Two runs take turns on one worker, step by step; a prioritised one then takes every
    step until it is done."""
    alice, ada = people_tx.caller("alice"), people_tx.caller("ada")
    first = run_start(caller=alice, query="count to 30", agent_id="countdown")[0]
    second = run_start(caller=alice, query="count to 4", agent_id="countdown")[0]
    waited_for(lambda: ticks(first) >= 1 and ticks(second) >= 1, seconds=10)  # they take turns
    steering_submit(caller=ada, run_id=second.pk, method="prioritize", payload={"priority": 10})
    at_priority = ticks(first)
    waited_for(lambda: Run.objects.get(pk=second.pk).status == RunStatus.COMPLETE, seconds=10)
    assert ticks(first) <= at_priority + 1  # at most the step already in flight
    steering_submit(caller=alice, run_id=first.pk, method="cancel", payload={"hard": True})
    waited_for(lambda: Run.objects.get(pk=first.pk).is_terminal, seconds=5)
