"""Benchmark one pause + decide cycle against LangGraph's `interrupt` + `Command(resume)` on
the same database, and the reads that grow with history. Prints a table of min/median/max
over rounds, the two sides alternating round by round (machines are noisy).

Runs against the configured database (bin/bench gives it a scratch one): SQLite on the
embedded default, PostgreSQL when DATABASE_URL is set. LangGraph is the optional `bench`
extra; without it, its column says so. `--live` prints only the live figures instead: a
pause committed → its frame on 1 to 2,000 inbox sockets of a real Daphne (_bench_live)."""

import os
import statistics
import tempfile
import threading
import time
from argparse import ArgumentParser
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import urlencode

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from approvals.domain.selectors import inbox_page, pause_cursor, pause_list, tokens_shown
from approvals.models import Pause, PauseState
from harbor_site.sqlite_wal import keep_wal_open
from runs.domain.services import run_start, steering_submit
from runs.identity.callers import Caller, caller_resolve
from runs.protocol.serializers import PauseListResponseSerializer
from runs.runtime.dispatch import drain
from runs.runtime.planner import CallTool, Decision, Finish, PlannerView
from runs.runtime.registry import Agent, register_agent
from runs.runtime.tools import Tool
from runs.runtime.wake import register as register_waker

from . import _bench_wake as latency
from ._bench_common import percentile, psycopg_round_trips
from ._bench_live import run_live_bench
from ._seed import seed_history


class _Planner:
    def decide(self, view: PlannerView) -> Decision:
        return Finish("done") if view.history else CallTool("launch", {"target": "moon"})


# The same agent twice: its planner asked between transactions (as a model is, which may
# take minutes), and decided inline, in the step's own transaction (a planner of rules).
AGENTS = {"between": "bench_gate", "inline": "bench_gate_inline"}
for kind, agent_id in AGENTS.items():
    register_agent(
        Agent(
            id=agent_id,
            description="one gated call",
            planner=_Planner,
            tools={"launch": Tool("launch", lambda args, ctx: {"ok": True}, approval="always")},
            planner_inline=kind == "inline",
        )
    )


# The worker of this process: it drains when a service wakes it, as the embedded pool does
# (a start that comes back parked wakes no one).
_woken = threading.Event()
register_waker("manual", _woken.set)


def _work() -> None:
    if _woken.is_set():
        _woken.clear()
        drain()


def _ours_cycle(caller: Caller, agent_id: str = AGENTS["between"]) -> None:
    run, _ = run_start(caller=caller, query="launch", agent_id=agent_id)
    _work()
    steering_submit(caller=caller, run_id=run.pk, method="approve", payload={})
    _work()


def _ours_cycle_numbered(caller: Caller, agent_id: str, index: int) -> None:
    _ours_cycle(caller, agent_id)


def _statements(cycle: Callable[[], None]) -> int:
    with CaptureQueriesContext(connection) as queries:
        cycle()
    return len([q for q in queries.captured_queries if not q["sql"].startswith(("SAVEPOINT", "RELEASE"))])


def _round_trips(cycle: Callable[[], None]) -> int:
    with psycopg_round_trips() as counted:
        cycle()
    return counted.count


def _time_split(cycle: Callable[[int], None], count: int, backend_pid: int) -> str:
    """Where a cycle's time goes, over `count` cycles, in ms per cycle: its wall time, the
    time spent waiting for PostgreSQL's answers, the server process's CPU time in them (on
    this machine only, else "-") and this process's CPU time (every thread; it overlaps the
    waits by their system calls)."""
    server, cpu, began = _process_cpu(backend_pid), time.process_time(), time.perf_counter()
    with psycopg_round_trips() as counted:
        for index in range(count):
            cycle(index)
    wall, cpu = time.perf_counter() - began, time.process_time() - cpu
    after = _process_cpu(backend_pid)
    spent = [wall, counted.waited, after - server if after is not None and server is not None else None, cpu]
    return " / ".join("-" if seconds is None else f"{seconds / count * 1000:.1f}" for seconds in spent)


def _process_cpu(pid: int) -> float | None:
    """A local process's CPU seconds (user + system), from /proc; None where it cannot be read."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class _LangGraph(NamedTuple):
    cycle: Callable[[int], None]
    statements: Callable[[], int]  # what one cycle sends to the database
    close: Callable[[], None]
    backend_pid: int  # its PostgreSQL server process (0: SQLite)


def _langgraph(database: str) -> _LangGraph | None:
    """A one-interrupt LangGraph graph on a checkpointer of the same database kind."""
    try:
        from typing import TypedDict

        from langgraph.graph import END, START, StateGraph
        from langgraph.types import Command, interrupt
    except ImportError:
        return None

    class State(TypedDict):
        decision: str

    def gate(state: State) -> State:
        return {"decision": interrupt({"tool": "launch", "args": {"target": "moon"}})}

    builder = StateGraph(State)
    builder.add_node("gate", gate)
    builder.add_edge(START, "gate")
    builder.add_edge("gate", END)
    sent = [0]
    scratch = tempfile.TemporaryDirectory(prefix="harbor-bench-langgraph-")
    if database == "sqlite":
        from langgraph.checkpoint.sqlite import SqliteSaver

        context: Any = SqliteSaver.from_conn_string(str(Path(scratch.name) / "langgraph.sqlite3"))
    else:
        from langgraph.checkpoint.postgres import PostgresSaver

        db = settings.DATABASES["default"]
        context = PostgresSaver.from_conn_string(
            f"postgresql://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}?sslmode=disable"
        )
    saver = context.__enter__()
    if hasattr(saver, "setup"):
        saver.setup()
    if database == "sqlite":
        # The durability ours runs at (harbor_site.settings: WAL, synchronous=NORMAL): a commit
        # waits for no disk flush on either side, so a slow disk does not decide the ratio.
        saver.conn.execute("PRAGMA synchronous=NORMAL")
    graph: Any = builder.compile(checkpointer=saver)

    def cycle(index: int) -> None:
        config = {"configurable": {"thread_id": f"bench-{time.monotonic_ns()}-{index}"}}
        graph.invoke({"decision": ""}, config)
        graph.invoke(Command(resume="approve"), config)

    def statements() -> int:
        """Counted as ours are, BEGIN and COMMIT included: SQLite's trace sees every
        statement; PostgreSQL's saver runs in autocommit, so its cursors see them all."""
        sent[0] = 0
        if database == "sqlite":
            saver.conn.set_trace_callback(lambda sql: sent.__setitem__(0, sent[0] + 1))
            try:
                cycle(-1)
            finally:
                saver.conn.set_trace_callback(None)
        else:
            plain, saver.conn.cursor_factory = saver.conn.cursor_factory, _counting_cursor(sent)
            try:
                cycle(-1)
            finally:
                saver.conn.cursor_factory = plain
        return sent[0]

    def close() -> None:
        context.__exit__(None, None, None)
        scratch.cleanup()

    return _LangGraph(cycle, statements, close, saver.conn.info.backend_pid if database != "sqlite" else 0)


def _counting_cursor(sent: list[int]) -> type:
    import psycopg

    class Counting(psycopg.Cursor):
        def execute(self, query: Any, params: Any = None, **kwargs: Any) -> Any:
            sent[0] += 1
            return super().execute(query, params, **kwargs)

        def executemany(self, query: Any, params_seq: Any, **kwargs: Any) -> None:
            params_seq = list(params_seq)
            sent[0] += len(params_seq)
            super().executemany(query, params_seq, **kwargs)

    return Counting


def _rate(cycle: Callable[[int], None], count: int) -> float:
    began = time.perf_counter()
    for index in range(count):
        cycle(index)
    return count / (time.perf_counter() - began)


def _spread(values: list[float], unit: str = "") -> str:
    return f"{min(values):.1f} / {statistics.median(values):.1f} / {max(values):.1f}{unit}"


def _ms(action: Callable[[], object], times: int) -> list[float]:
    spent = []
    for _ in range(times):
        began = time.perf_counter()
        action()
        spent.append((time.perf_counter() - began) * 1000)
    return sorted(spent)


def _pause_list_page(caller: Caller) -> object:
    """What POST /v1/pause/list does after authentication: the page and its snapshots."""
    page = pause_list(caller=caller)
    context = {"may_see_token": tokens_shown(caller=caller, pauses=page.rows)}
    return PauseListResponseSerializer(page, context=context).data


class Command(BaseCommand):
    help = "Benchmark pause + decide cycles against LangGraph, and pause.list as history grows."

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--rounds", type=int, default=3)
        parser.add_argument("--cycles", type=int, default=50, help="cycles per round")
        parser.add_argument("--history", type=int, default=300, help="decided pauses to seed for the read figures")
        parser.add_argument(
            "--seed", type=int, default=0, help="bulk-write this many more pauses (1%% open) before the read figures"
        )
        parser.add_argument("--reads-only", action="store_true", help="skip the cycle figures")
        parser.add_argument("--live", action="store_true", help="only the live figures: pause → inbox socket frames")
        parser.add_argument("--sockets", default="500,1000,2000", help="--live: socket counts, comma-separated")
        parser.add_argument("--live-pauses", type=int, default=50, help="--live: pauses timed on one socket")
        parser.add_argument("--live-fanouts", type=int, default=3, help="--live: pauses timed per socket count")
        parser.add_argument(
            "--replays", type=int, default=150, help="--live: sockets of one tenant replaying its log (0: skip the row)"
        )
        parser.add_argument("--replay-events", type=int, default=1500, help="--live: the log they replay")
        latency.add_arguments(parser)

    def handle(
        self, *args: str, rounds: int, cycles: int, history: int, seed: int, reads_only: bool, **options: Any
    ) -> None:
        settings.HARBOR_EXECUTOR = "manual"
        keep_wal_open()  # SQLite: as the server process does (its log held open, checkpointed off the commits)
        database = connection.vendor
        if options["live"]:
            layer = "redis pub/sub" if settings.HARBOR_LIVE_REDIS_URL else "in-memory channel layer"
            self.stdout.write(f"Harbor live benchmark on {database}, {layer}, one Daphne")
            sizes = [int(size) for size in options["sockets"].split(",") if size]
            run_live_bench(
                stdout=self.stdout,
                sizes=sizes,
                pauses=options["live_pauses"],
                fanouts=options["live_fanouts"],
                replays=options["replays"],
                replay_events=options["replay_events"],
                port=options["port"] or None,
                layer=layer,
            )
            return
        alice = caller_resolve(tenant="acme", user="alice", session="bench")
        bob = caller_resolve(tenant="acme", user="bob", session="bench")
        if options["latency_only"]:
            self.stdout.write(f"Harbor latency on {database}")
            return latency.rows(self.stdout.write, alice, options)
        self.stdout.write(f"Harbor benchmark on {database} ({rounds} rounds of {cycles} cycles; min / median / max)")
        if not reads_only:
            self._cycles(alice, rounds, cycles, database)
        self._seed(alice, history)
        if seed:
            began = time.perf_counter()
            seed_history(
                caller=alice,
                count=seed,
                decider=bob.user,
                progress=lambda n: self.stderr.write(f"  seeded {n}/{seed}", ending="\r"),
            )
            self.stderr.write(f"\n  seeded {seed} pauses in {time.perf_counter() - began:.0f} s")
        self._reads(alice, bob, history + seed)
        latency.rows(self.stdout.write, alice, options)

    def _cycles(self, alice: Caller, rounds: int, cycles: int, database: str) -> None:
        langgraph = _langgraph(database)
        ours: dict[str, list[float]] = {kind: [] for kind in AGENTS}
        theirs: list[float] = []
        # A warm-up round of each side, then the statistics a deployment's autovacuum keeps
        # (a scratch database has none, and a plan cached while its tables were empty would
        # stay: ANALYZE has both sides' statements planned again).
        for agent_id in AGENTS.values():
            _rate(partial(_ours_cycle_numbered, alice, agent_id), cycles)
        if langgraph:
            _rate(langgraph.cycle, cycles)
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE")
        for _ in range(rounds):  # alternate the sides, round by round
            for kind, agent_id in AGENTS.items():
                ours[kind].append(_rate(partial(_ours_cycle_numbered, alice, agent_id), cycles))
            if langgraph:
                theirs.append(_rate(langgraph.cycle, cycles))
        statements = {kind: _statements(partial(_ours_cycle, alice, agent_id)) for kind, agent_id in AGENTS.items()}
        trips_line = ""
        if database == "postgresql":
            trips = {kind: _round_trips(partial(_ours_cycle, alice, agent_id)) for kind, agent_id in AGENTS.items()}
            theirs_trips = f", LangGraph {_round_trips(partial(langgraph.cycle, -1))}" if langgraph else ""
            ours_pid = connection.connection.info.backend_pid
            split = {
                kind: _time_split(partial(_ours_cycle_numbered, alice, agent_id), cycles, ours_pid)
                for kind, agent_id in AGENTS.items()
            }
            theirs_split = (
                f", LangGraph {_time_split(langgraph.cycle, cycles, langgraph.backend_pid)}" if langgraph else ""
            )
            trips_line = (
                f"  round trips to PostgreSQL per cycle     ours {trips['between']} "
                f"(inline planner {trips['inline']}){theirs_trips}\n"
                f"  a cycle's ms: wall / waiting for PostgreSQL / its server process's CPU / our process's CPU\n"
                f"                                          ours {split['between']} "
                f"(inline planner {split['inline']}){theirs_split}"
            )

        approve_ms = []
        for _ in range(cycles):
            run, _ = run_start(caller=alice, query="launch", agent_id="bench_gate")
            drain()
            began = time.perf_counter()
            steering_submit(caller=alice, run_id=run.pk, method="approve", payload={})
            approve_ms.append((time.perf_counter() - began) * 1000)
        drain()
        approve_ms.sort()

        self.stdout.write("  pause + decide cycles/s, in-process, one thread")
        for kind, label in (("between", "a planner asked between transactions"), ("inline", "an inline planner")):
            ratio = (
                f"  (÷ LangGraph = {statistics.median(ours[kind]) / statistics.median(theirs):.2f}×)" if theirs else ""
            )
            self.stdout.write(f"    ours, {label:<38} {_spread(ours[kind])}{ratio}")
        if langgraph:
            self.stdout.write(f"    LangGraph {'':<34} {_spread(theirs)}")
        else:
            self.stdout.write("    LangGraph: not installed (pip install -e '.[bench]')")
        theirs_sent = f", LangGraph {langgraph.statements()}" if langgraph else ""
        if langgraph:
            langgraph.close()
        self.stdout.write(
            f"  SQL statements per cycle (no savepoints) ours {statements['between']} "
            f"(inline planner {statements['inline']}){theirs_sent}"
        )
        if trips_line:
            self.stdout.write(trips_line)
        self.stdout.write(
            f"  approve service call, p50 / p99 ms    ours {statistics.median(approve_ms):.1f} / "
            f"{percentile(approve_ms, 0.99):.1f}"
        )

    def _reads(self, alice: Caller, bob: Caller, size: int) -> None:
        open_count = Pause.objects.filter(tenant=bob.tenant, state=PauseState.PAUSED).count()
        times = 30
        approver = _ms(lambda: _pause_list_page(bob), times)
        member = _ms(lambda: _pause_list_page(alice), times)
        client = Client()
        client.force_login(bob.user)
        if client.get("/inbox/").status_code != 200:
            raise CommandError("/inbox/ did not answer 200 for the approver")
        inbox = _ms(lambda: client.get("/inbox/"), times)
        # An older page, half way down the open pauses (keyset: the same cost at any depth).
        older = inbox_page(caller=bob, size=max(1, open_count // 2)).next_cursor
        older_path = f"/inbox/?{urlencode({'before': older})}" if older else "/inbox/"
        older_ms = _ms(lambda: client.get(older_path), times)
        # What every open inbox asks on a pause event: the cards since its newest one.
        newest = inbox_page(caller=bob, size=1).pauses
        since = f"/inbox/?{urlencode({'fragment': 'cards', 'after': pause_cursor(newest[0])})}" if newest else "/inbox/"
        since_ms = _ms(lambda: client.get(since), times)
        label = f"{size} pauses ({open_count} open)"
        self.stdout.write(
            f"  pause.list page, p95 ms, {label}: approver {percentile(approver, 0.95):.1f}, member {percentile(member, 0.95):.1f}"
        )
        self.stdout.write(
            f"  /inbox/ for an approver, p50 ms, {label}: {statistics.median(inbox):.1f}"
            f" (a page half way down: {statistics.median(older_ms):.1f}; {len(client.get('/inbox/').content) // 1024} KB)"
        )
        self.stdout.write(f"  /inbox/ live update (cards since the newest), p50 ms: {statistics.median(since_ms):.1f}")

    def _seed(self, caller: Caller, count: int) -> None:
        """History: decided pauses, the shape that makes unbounded reads grow."""
        for _ in range(count):
            _ours_cycle(caller)
