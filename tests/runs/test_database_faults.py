"""The database drops its connections (a restart, a failover, an idle timeout on the way):
requests and steps go on with new ones; a step's record is made again rather than its body
run twice, and a step the database failed is taken again, never failed for it. PostgreSQL,
with the pool the production settings configure."""

import threading
import time

import pytest
from django.db import OperationalError, connection

from runs import tasks
from runs.domain.services import run_start, steering_submit
from runs.models import Run, RunStatus, ToolCall
from runs.runtime import handles
from runs.runtime.dispatch import drain
from runs.runtime.planner import CallTool, Finish
from runs.runtime.registry import Agent, register_agent, unregister_agent
from runs.runtime.tools import Tool
from tests.conftest import one_call_agent, requires_postgres
from tests.dropped_connections import commit_then_lose_the_answer, lone_statement_then_lose_the_answer, terminate

pytestmark = [requires_postgres, pytest.mark.django_db(transaction=True)]


@pytest.fixture(autouse=True)
def _fresh_connection_after():
    """A test that fails leaves no dropped connection to the tests after it."""
    yield
    connection.close()


def _in_thread(work) -> list:
    out: list = []

    def run() -> None:
        try:
            out.append(work())
        finally:
            connection.close()  # back to the pool, as a request's end does

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    return out


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
    answers = [_in_thread(lambda: Run.objects.count())[0] for _ in range(5)]
    assert answers == [0] * 5
    assert time.monotonic() - began < 2  # not a check, a back-off and a retry per dead connection


@pytest.fixture
def dropping_tool():
    """An agent whose one tool, the first time it runs, drops its worker's database
    connection (after `seconds` of work), or with seconds=None loses the answer to the
    record's COMMIT, with "lone" the answer to the record sent as one statement; then answers."""
    calls: list[float | str | None] = []

    def tool(seconds: float | str | None):
        def body(args, ctx):
            calls.append(seconds)
            if len(calls) == 1 and seconds is None:
                commit_then_lose_the_answer()
            elif len(calls) == 1 and seconds == "lone":
                lone_statement_then_lose_the_answer()
            elif len(calls) == 1 and isinstance(seconds, float | int):
                terminate([connection.connection.info.backend_pid])
                time.sleep(seconds)
            return {"ok": True}

        one_call_agent("dropping", body)
        return calls

    yield tool
    unregister_agent("dropping")


def _ledger(run: Run) -> list[tuple[int, str]]:
    return list(ToolCall.objects.filter(run=run).order_by("attempt").values_list("attempt", "outcome"))


@pytest.mark.parametrize(
    "seconds",
    [
        0,  # its record's connection is gone: the record is made again on a new one
        1.1,  # a slow body gave its connection back: it records on a checked one
        None,  # its record committed, the answer lost: PostgreSQL says it landed
        "lone",  # its record, one statement of its own, landed, the answer lost: the run says so
    ],
)
def test_a_step_whose_connection_the_database_dropped_goes_on_and_runs_its_body_once(
    people_tx, dropping_tool, seconds, caplog
):
    calls = dropping_tool(seconds)
    run, _ = run_start(caller=people_tx.caller("alice"), query="work", agent_id="dropping")
    drain()
    run.refresh_from_db()
    assert (run.status, run.answer) == (RunStatus.COMPLETE, "done")
    assert _ledger(run) == [(1, "completed")] and len(calls) == 1
    assert not [r for r in caplog.records if "taken again" in r.getMessage()]  # its worker went on


@pytest.fixture
def asking_tool():
    """An agent whose one tool, the first time it runs, drops its worker's database
    connection and then asks the database something: through the runtime (a hard cancel, by
    sleeping; its lease, by the fence) or itself."""
    calls: list[str] = []

    def tool(asks: str):
        def body(args, ctx):
            calls.append(asks)
            if len(calls) == 1:
                terminate([connection.connection.info.backend_pid])
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
    drain()  # a step taken again: the lease it released
    run.refresh_from_db()
    assert (run.status, run.answer) == (RunStatus.COMPLETE, "done")
    assert _ledger(run) == ledger and len(calls) == len(ledger)


def test_a_lease_renewal_whose_connection_was_dropped_is_made_on_a_new_one(people_tx, caplog):
    from datetime import timedelta

    from django.utils import timezone

    from runs.runtime.lease import Lease, _keeper

    run, _ = run_start(caller=people_tx.caller("alice"), query="count to 2", agent_id="countdown")
    soon = timezone.now() + timedelta(seconds=5)
    Run.objects.filter(pk=run.pk).update(status=RunStatus.RUNNING, lease_owner="w1", lease_expires_at=soon)
    terminate([connection.cursor().connection.info.backend_pid])
    _keeper._renew(Lease(run.pk, "w1"))
    renewed = Run.objects.get(pk=run.pk).lease_expires_at
    assert renewed is not None and renewed > soon  # renewed, not left to lapse
    assert not [r for r in caplog.records if "renewal" in r.getMessage()]


def test_a_worker_task_whose_connection_was_dropped_looks_again_on_a_new_one(people_tx, settings):
    """A Celery dispatch task that lost its connection would lose the wake-up it carries
    (the sweep makes it good, seconds later): it looks once more on a new connection."""
    settings.HARBOR_HANDOFF = False  # left to a worker's look, as where the workers are Celery's
    run, _ = run_start(caller=people_tx.caller("alice"), query="count to 2", agent_id="countdown")
    terminate([connection.cursor().connection.info.backend_pid])
    assert tasks.dispatch() == 1
    run.refresh_from_db()
    assert run.status == RunStatus.COMPLETE


def test_a_planner_answer_whose_connection_the_database_dropped_is_acted_on_not_asked_again(people_tx):
    """A planner may be a model that took minutes: its answer outlives the connection."""
    asked: list[int] = []

    class Planner:
        def decide(self, view):
            asked.append(len(view.history))
            if len(asked) == 1:
                terminate([connection.connection.info.backend_pid])
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


def test_a_hand_off_whose_connection_the_database_dropped_goes_on_at_once(people_tx):
    """The approval handed the run to this process's worker; the worker's first read, on a
    dropped connection, is made again on a new one, rather than the run waiting out its
    lease for another worker."""
    ran: list[dict] = []

    class Planner:
        def decide(self, view):
            return Finish("done") if view.history else CallTool("launch", {})

    def launch(args, ctx):
        ran.append(args)
        return {}

    register_agent(
        Agent(
            id="gated", description="test", planner=Planner, tools={"launch": Tool("launch", launch, approval="always")}
        )
    )
    try:
        alice = people_tx.caller("alice")
        run, _ = run_start(caller=alice, query="launch", agent_id="gated")
        drain()
        steering_submit(caller=alice, run_id=run.pk, method="approve", payload={})
        handles.register("elsewhere", "socket", object())  # the worker looks for ended runs first
        terminate([connection.connection.info.backend_pid])
        drain()
    finally:
        unregister_agent("gated")
        handles.release_run("elsewhere")
    run.refresh_from_db()
    assert (run.status, len(ran)) == (RunStatus.COMPLETE, 1)
    assert _ledger(run) == [(1, "completed")]


def test_a_start_whose_connection_was_dropped_is_the_databases_failure_not_a_crash_of_its_step(
    people_tx, probe, caplog
):
    """Its first step (the lease taken for this process's worker) meets the lost connection:
    the error is the database's, raised as it is (an API request is answered again), not
    logged as a crash of the step and tried once more on the same dead connection."""
    alice = people_tx.caller("alice")
    run_start(caller=alice, query="launch", agent_id="probe")  # warm: this connection named and checked
    terminate([connection.connection.info.backend_pid])
    with pytest.raises(OperationalError):
        run_start(caller=alice, query="launch", agent_id="probe")
    assert not [r for r in caplog.records if "crashed" in r.getMessage()]
    connection.close()
    assert Run.objects.count() == 1
