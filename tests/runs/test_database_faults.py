"""The database drops its connections (a restart, a failover, an idle timeout on the way):
requests and steps go on with new ones, and a step the database failed is taken again,
never failed for it. PostgreSQL, with the pool the production settings configure."""

import threading
import time

import psycopg
import pytest
from django.db import connection

from runs.domain.services import run_start
from runs.models import Run, RunStatus, ToolCall
from runs.runtime.dispatch import drain
from runs.runtime.planner import CallTool, Finish
from runs.runtime.registry import Agent, register_agent, unregister_agent
from runs.runtime.tools import Tool
from tests.conftest import requires_postgres

pytestmark = [requires_postgres, pytest.mark.django_db(transaction=True)]


def _terminate(pids: list[int]) -> None:
    """Drop these server connections, as a restart would, from a connection of our own."""
    params = connection.get_connection_params()
    with psycopg.connect(**{k: v for k, v in params.items() if k != "cursor_factory"}, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(pid) FROM unnest(%s::int[]) AS pid", [pids])


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
    _terminate(pids)
    began = time.monotonic()
    answers = [_in_thread(lambda: Run.objects.count())[0] for _ in range(5)]
    assert answers == [0] * 5
    assert time.monotonic() - began < 2  # not a check, a back-off and a retry per dead connection


@pytest.fixture
def dropping_tool():
    """An agent whose one tool drops its worker's database connection the first time it
    runs (after `seconds` of work), then answers."""
    calls: list[float] = []

    def tool(seconds: float):
        def body(args, ctx):
            calls.append(seconds)
            if len(calls) == 1:
                _terminate([connection.connection.info.backend_pid])
                time.sleep(seconds)
            return {"ok": True}

        class Planner:
            def decide(self, view):
                return Finish("done") if view.history else CallTool("work", {})

        register_agent(Agent(id="dropping", description="test", planner=Planner, tools={"work": Tool("work", body)}))
        return calls

    yield tool
    unregister_agent("dropping")


def _ledger(run: Run) -> list[tuple[int, str]]:
    return list(ToolCall.objects.filter(run=run).order_by("attempt").values_list("attempt", "outcome"))


@pytest.mark.parametrize(
    "seconds, ledger",
    [
        (0, [(1, "lost"), (2, "completed")]),  # its record failed: the step is taken again, not failed
        (1.1, [(1, "completed")]),  # a slow body gave its connection back: it records on a live one, once
    ],
)
def test_a_step_whose_connection_the_database_dropped_goes_on(people_tx, dropping_tool, seconds, ledger):
    calls = dropping_tool(seconds)
    run, _ = run_start(caller=people_tx.caller("alice"), query="work", agent_id="dropping")
    drain()
    run.refresh_from_db()
    assert (run.status, run.answer) == (RunStatus.COMPLETE, "done")
    assert _ledger(run) == ledger and len(calls) == len(ledger)
