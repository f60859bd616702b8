"""Pause + decide cycles as requests make them, Harbor beside LangGraph.

A cycle is one gate of a run of several gated calls in a row: the approver resolved from
their identity as a request resolves it (a fresh Caller each time), the decision
(`steering_submit` approve, naming the pause as the inbox does), then the worker's step that
runs the approved tool and parks the run on its next gate (`drain()` on the manual
executor, so the step runs in this thread). A run's start (its owner resolved the same
way) is part of the round too. Only what the approver already had on screen, the open
pause's id, is read off the clock."""

import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from django.db import connection
from django.test.utils import CaptureQueriesContext

from approvals.domain.selectors import pause_open_for_run
from runs.application import run_start, steering_submit
from runs.identity.callers import caller_resolve
from runs.models import Run
from runs.runtime.dispatch import drain

from .agents import gated_agent
from .common import psycopg_round_trips
from .langgraph_side import LangGraphSide, langgraph_side

TENANT, OWNER, APPROVER = "acme", "alice", "bob"  # harbor_demo's people (the tests' too)
STATEMENT_CEILING = 60  # per cycle: far above today's count, low enough to catch a query per row


class Stopwatch:
    """Seconds spent inside `timed()` blocks."""

    def __init__(self) -> None:
        self.seconds = 0.0

    def timed(self, action: Callable[[], object]) -> None:
        began = time.perf_counter()
        action()
        self.seconds += time.perf_counter() - began


def start(agent_id: str) -> Run:
    """A run started as POST /v1/task does, then its first step (up to its first gate)."""
    owner = caller_resolve(tenant=TENANT, user=OWNER, session="bench-owner")
    run, _ = run_start(caller=owner, query="launch", agent_id=agent_id)
    drain()
    return run


def open_pause(run: Run) -> str:
    pause = pause_open_for_run(run=run)
    if pause is None:
        raise RuntimeError(f"run {run.pk} did not park on a gate")
    return pause.pk


def decide(run_id: str, pause_id: str) -> None:
    """One approval as a request makes it, then the step it lets go on."""
    approver = caller_resolve(tenant=TENANT, user=APPROVER, session="bench-approver")
    steering_submit(caller=approver, run_id=run_id, method="approve", payload={}, pause_id=pause_id)
    drain()


def ours_round(cycles: int, gates: int, watch: Stopwatch | None = None) -> Stopwatch:
    """`cycles` gates decided, over runs of `gates` gated calls each."""
    agent_id, watch = gated_agent(gates), watch or Stopwatch()
    left = cycles
    while left > 0:
        run: list[Run] = []
        watch.timed(lambda: run.append(start(agent_id)))
        for _ in range(gates):
            pause_id = open_pause(run[0])  # off the clock: on the approver's screen already
            watch.timed(lambda: decide(run[0].pk, pause_id))
        left -= gates
    return watch


def ours_one_cycle(gates: int) -> Callable[[], None]:
    """A run parked on its first gate, and the cycle that decides it (to be counted)."""
    run = start(gated_agent(gates))
    pause_id = open_pause(run)
    return lambda: decide(run.pk, pause_id)


@dataclass
class CycleFigures:
    langgraph: bool  # installed (the `bench` extra)
    ours: list[float] = field(default_factory=list)
    theirs: list[float] = field(default_factory=list)
    statements: int = 0
    theirs_statements: int | None = None
    round_trips: int | None = None
    theirs_round_trips: int | None = None
    split: str = ""  # PostgreSQL: where a cycle's time goes (time_split)
    theirs_split: str = ""

    @property
    def ratio(self) -> float | None:
        if not self.theirs:
            return None
        return statistics.median(self.ours) / statistics.median(self.theirs)


def measure(*, rounds: int, cycles: int, gates: int) -> CycleFigures:
    """A warm-up round of each side, then `rounds` rounds alternating the sides."""
    theirs = langgraph_side(connection.vendor, gates)
    try:
        return _measure(theirs, rounds=rounds, cycles=cycles, gates=gates)
    finally:
        if theirs:
            theirs.close()


def _measure(theirs: LangGraphSide | None, *, rounds: int, cycles: int, gates: int) -> CycleFigures:
    figures = CycleFigures(langgraph=theirs is not None)
    ours_round(cycles, gates)
    if theirs:
        theirs.round(cycles)
    # The statistics a deployment's autovacuum keeps: a scratch database has none, and a
    # plan cached while its tables were empty would stay.
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    for _ in range(rounds):
        figures.ours.append(cycles / ours_round(cycles, gates).seconds)
        if theirs:
            figures.theirs.append(cycles / theirs.round(cycles))
    cycle = ours_one_cycle(gates)
    with CaptureQueriesContext(connection) as queries:
        cycle()
    figures.statements = len(queries.captured_queries)
    if theirs:
        figures.theirs_statements = theirs.statements()
    if connection.vendor == "postgresql":
        cycle = ours_one_cycle(gates)
        with psycopg_round_trips() as counted:
            cycle()
        figures.round_trips = counted.count
        ours_pid = connection.connection.info.backend_pid
        figures.split = time_split(lambda: ours_round(cycles, gates), cycles, ours_pid)
        if theirs:
            figures.theirs_round_trips = theirs.round_trips()
            figures.theirs_split = time_split(lambda: theirs.round(cycles), cycles, theirs.backend_pid)
    return figures


def time_split(round_: Callable[[], object], cycles: int, backend_pid: int) -> str:
    """Where a round's time goes, in ms per cycle: wall, waiting for PostgreSQL's answers,
    the server process's CPU (on this machine only, else "-") and this process's CPU (every
    thread; it overlaps the waits by their system calls)."""
    server, cpu, began = _process_cpu(backend_pid), time.process_time(), time.perf_counter()
    with psycopg_round_trips() as counted:
        round_()
    wall, cpu = time.perf_counter() - began, time.process_time() - cpu
    after = _process_cpu(backend_pid)
    spent = [wall, counted.waited, after - server if after is not None and server is not None else None, cpu]
    return " / ".join("-" if seconds is None else f"{seconds / cycles * 1000:.1f}" for seconds in spent)


def _process_cpu(pid: int) -> float | None:
    """A local process's CPU seconds (user + system), from /proc; None where it cannot be read."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
