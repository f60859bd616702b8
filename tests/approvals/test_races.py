"""Races on PostgreSQL with real threads: exactly one decision lands, the gated body runs
exactly once, and concurrent workers never execute a step twice."""

import threading

import pytest
from django.db import connection

from approvals.models import Approval, Pause, PauseState
from runs.application import run_start, steering_submit
from runs.kernel.errors import AlreadyResumed
from runs.models import RunStatus, ToolCall
from runs.runtime.dispatch import drain
from tests.conftest import requires_postgres
from tests.factories import PauseFactory

from .policy_setup import acme_policy_load

pytestmark = [requires_postgres, pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def in_threads(count: int, job) -> list:
    """Run `job` in `count` threads released together; return each result or exception."""
    barrier = threading.Barrier(count)
    results: list = [None] * count

    def worker(index: int) -> None:
        try:
            barrier.wait()
            results[index] = job(index)
        except Exception as error:  # collected for the assertions
            results[index] = error
        finally:
            connection.close()

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    return results


def test_fifty_concurrent_approvals_land_exactly_once(people_tx, probe):
    run = PauseFactory.create(caller=people_tx.caller("alice")).run
    callers = [people_tx.caller("bob", f"web-{i}") for i in range(50)]
    results = in_threads(
        50,
        lambda i: steering_submit(
            caller=callers[i], run_id=run.pk, method="approve", payload={"reason": f"approver {i}"}
        ),
    )
    landed = [r for r in results if not isinstance(r, Exception)]
    refused = [r for r in results if isinstance(r, AlreadyResumed)]
    assert len(landed) == 1 and len(refused) == 49, results
    pause = Pause.objects.get(run=run)
    assert pause.state == PauseState.RESUMED and pause.decided_session == landed[0].instruction.actor_session
    in_threads(4, lambda i: drain())  # duplicate wake-ups racing for the approved run
    run.refresh_from_db()
    assert run.status == RunStatus.COMPLETE
    assert probe.calls == [{"target": "moon"}]


def test_concurrent_workers_never_run_a_step_twice(people_tx):
    runs = [run_start(caller=people_tx.caller("alice"), query="count to 5", agent_id="countdown")[0] for _ in range(3)]
    in_threads(6, lambda i: drain())
    for run in runs:
        run.refresh_from_db()
        assert run.status == RunStatus.COMPLETE
        ticks = [e["args"]["n"] for e in run.checkpoint["history"]]
        assert ticks == [1, 2, 3, 4, 5]
        assert run.events.filter(type="tool.invoked").count() == 5


def test_concurrent_decisions_of_different_kinds_still_land_once(people_tx, probe):
    run = PauseFactory.create(caller=people_tx.caller("alice")).run
    bob, alice = people_tx.caller("bob", "web"), people_tx.caller("alice")
    results = in_threads(
        20,
        lambda i: steering_submit(
            caller=bob if i % 2 else alice, run_id=run.pk, method="reject" if i % 2 else "approve"
        ),
    )
    assert sum(not isinstance(r, Exception) for r in results) == 1
    assert all(isinstance(r, AlreadyResumed) for r in results if isinstance(r, Exception))
    drain()
    run.refresh_from_db()
    assert run.status in (RunStatus.COMPLETE, RunStatus.FAILED)
    assert len(probe.calls) == (1 if run.status == RunStatus.COMPLETE else 0)


@pytest.mark.parametrize("attempt", range(5))
def test_two_release_managers_approving_at_once_deploy_exactly_once(people_tx, attempt):
    """Quorum 2 (acme's production deploys): bob and carol approve at the same instant. Both
    count, the gate clears once, and the deploy's body runs once."""
    acme_policy_load(people_tx)
    pause = PauseFactory.create(
        caller=people_tx.caller("alice"), query="deploy build 9 to production", agent_id="deploy"
    )
    run = pause.run
    callers = [people_tx.caller("bob", "web"), people_tx.caller("carol", "web")]
    results = in_threads(2, lambda i: steering_submit(caller=callers[i], run_id=run.pk, method="approve"))
    assert not [r for r in results if isinstance(r, Exception)], results
    pause.refresh_from_db()
    assert pause.state == PauseState.RESUMED and Approval.objects.filter(pause=pause).count() == 2
    in_threads(4, lambda i: drain())
    run.refresh_from_db()
    assert run.status == RunStatus.COMPLETE
    assert ToolCall.objects.filter(run=run, tool="deploy_to_production").count() == 1
    assert run.events.filter(type="tool.invoked", payload__Tool="deploy_to_production").count() == 1
