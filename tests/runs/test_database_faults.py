"""The database drops its connections (a restart, a failover, an idle timeout on the way):
the pool hands out live ones, a lease is renewed on a new one, a tool body that meets the
loss never fails its run, and a worker's look for work looks again. PostgreSQL, with the
pool the production settings configure, its backends really terminated."""

import threading
import time
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from runs import tasks
from runs.application import run_start
from runs.models import Run, RunStatus, ToolCall
from runs.runtime.dispatch import drain
from runs.runtime.lease import Lease, _keeper
from runs.runtime.planner import CallTool, Finish
from runs.runtime.registry import Agent, register_agent, unregister_agent
from runs.runtime.tools import Tool
from tests.conftest import one_call_agent, requires_postgres
from tests.dropped_connections import terminate, terminate_own_backend

pytestmark = [requires_postgres, pytest.mark.django_db(transaction=True)]


@pytest.fixture(autouse=True)
def _fresh_connection_after():
    """A test that fails leaves no dropped connection to the tests after it."""
    yield
    connection.close()


def _in_thread(work):
    out: list = []

    def run() -> None:
        try:
            out.append(work())
        finally:
            connection.close()  # back to the pool, as a request's end does

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    return out[0]


def _ledger(run: Run) -> list[tuple[int, str]]:
    return list(ToolCall.objects.filter(run=run).order_by("attempt").values_list("attempt", "outcome"))


def test_a_pool_whose_connections_were_all_dropped_hands_out_a_live_one_at_once(people_tx):
    held, pids = threading.Barrier(5), []

    def hold() -> None:
        pids.append(connection.cursor().connection.info.backend_pid)
        held.wait()  # five connections at once: the pool keeps them all
        connection.close()

    threads = [threading.Thread(target=hold) for _ in range(5)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    terminate(pids)
    began = time.monotonic()
    assert [_in_thread(Run.objects.count) for _ in range(5)] == [0] * 5
    assert time.monotonic() - began < 2  # checked as handed out: not a back-off per dead connection


def test_a_lease_renewal_whose_connection_was_dropped_is_made_on_a_new_one(people_tx, caplog):
    run, _ = run_start(caller=people_tx.caller("alice"), query="count to 2", agent_id="countdown")
    soon = timezone.now() + timedelta(seconds=5)
    Run.objects.filter(pk=run.pk).update(status=RunStatus.RUNNING, lease_owner="w1", lease_expires_at=soon)
    terminate_own_backend()
    _keeper._renew(Lease(run.pk, "w1"))
    renewed = Run.objects.get(pk=run.pk).lease_expires_at
    assert renewed is not None and renewed > soon  # renewed, not left to lapse
    assert not [r for r in caplog.records if "renewal" in r.getMessage()]


@pytest.fixture
def asking_tool():
    """An agent whose one tool, the first time it runs, drops its worker's database
    connection and then asks the database something: through the runtime (a hard cancel,
    by sleeping; its lease, by the fence) or itself."""
    calls: list[str] = []

    def tool(asks: str) -> list[str]:
        def body(args, ctx):
            calls.append(asks)
            if len(calls) == 1:
                terminate_own_backend()
                {"sleep": lambda: ctx.sleep(0.01), "fence": ctx.fence, "itself": Run.objects.count}[asks]()
            return {"ok": True}

        one_call_agent("asking", body)
        return calls

    yield tool
    unregister_agent("asking")


@pytest.mark.parametrize(
    "asks, ledger",
    [
        ("sleep", [(1, "completed")]),  # the runtime asks once more, on a new connection
        ("fence", [(1, "completed")]),
        ("itself", [(1, "lost"), (2, "completed")]),  # the database failed the step: taken again
    ],
)
def test_a_tool_body_that_meets_a_dropped_connection_never_fails_its_run(people_tx, asking_tool, asks, ledger):
    calls = asking_tool(asks)
    run, _ = run_start(caller=people_tx.caller("alice"), query="work", agent_id="asking")
    drain()
    run.refresh_from_db()
    assert (run.status, run.answer) == (RunStatus.COMPLETE, "done")
    assert _ledger(run) == ledger and len(calls) == len(ledger)


def test_a_worker_task_whose_connection_was_dropped_looks_again_on_a_new_one(people_tx):
    """A Celery dispatch task that lost its connection would lose the wake-up it carries
    (the sweep makes it good, seconds later): it looks once more on a new connection."""
    run, _ = run_start(caller=people_tx.caller("alice"), query="count to 2", agent_id="countdown")
    terminate_own_backend()
    assert tasks.dispatch() == 3  # two ticks and the answer, a step each
    run.refresh_from_db()
    assert run.status == RunStatus.COMPLETE


def test_a_planner_answer_whose_connection_was_dropped_is_acted_on_not_asked_again(people_tx):
    """A planner may be a model that took minutes: its answer outlives the connection."""
    asked: list[int] = []

    class Planner:
        def decide(self, view):
            asked.append(len(view.history))
            if len(asked) == 1:
                terminate_own_backend()
            return Finish("done") if view.history else CallTool("work", {})

    register_agent(
        Agent(id="forgetful", description="test", planner=Planner, tools={"work": Tool("work", lambda a, c: {})})
    )
    try:
        run, _ = run_start(caller=people_tx.caller("alice"), query="work", agent_id="forgetful")
        drain()
    finally:
        unregister_agent("forgetful")
    run.refresh_from_db()
    assert (run.status, run.answer) == (RunStatus.COMPLETE, "done")
    assert asked == [0, 1]  # each step's planner asked once
    assert _ledger(run) == [(1, "completed")]
