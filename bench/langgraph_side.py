"""LangGraph beside Harbor: a graph of the same shape (`gates` interrupts in a row, the
tool run after each resume) on a checkpointer of the same database kind and durability.
LangGraph is the optional `bench` extra; without it, this side is left out."""

import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

from django.conf import settings
from psycopg.conninfo import make_conninfo

from .common import psycopg_round_trips


@dataclass
class LangGraphSide:
    start: Callable[[str], None]  # a thread, up to its first interrupt
    resume: Callable[[str], None]  # one gate approved, up to the next interrupt
    gates: int
    backend_pid: int  # its PostgreSQL server process (0: SQLite)
    trace: Callable[[Callable[[str], None] | None], None]  # every statement it sends
    close: Callable[[], None]

    def round(self, cycles: int) -> float:
        """Seconds for `cycles` gates, over threads of `gates` interrupts each."""
        began, left = time.perf_counter(), cycles
        while left > 0:
            thread = f"bench-{time.monotonic_ns()}"
            self.start(thread)
            for _ in range(self.gates):
                self.resume(thread)
            left -= self.gates
        return time.perf_counter() - began

    def one_cycle(self) -> Callable[[], None]:
        thread = f"bench-{time.monotonic_ns()}"
        self.start(thread)
        return lambda: self.resume(thread)

    def statements(self) -> int:
        """One cycle's statements, BEGIN and COMMIT included (SQLite's trace sees every one;
        PostgreSQL's saver runs in autocommit, so its cursors see them all)."""
        cycle, sent = self.one_cycle(), [0]

        def count(sql: str) -> None:
            sent[0] += 1

        self.trace(count)
        try:
            cycle()
        finally:
            self.trace(None)
        return sent[0]

    def round_trips(self) -> int:
        cycle = self.one_cycle()
        with psycopg_round_trips() as counted:
            cycle()
        return counted.count


class State(TypedDict):
    done: int


def _graph(gates: int) -> Any:
    from langgraph.graph import END, START, StateGraph
    from langgraph.types import interrupt

    def gate(state: State) -> State:
        interrupt({"tool": "launch", "args": {"gate": state["done"] + 1}})
        return {"done": state["done"] + 1}  # the approved tool has run

    builder = StateGraph(State)
    builder.add_node("gate", gate)
    builder.add_edge(START, "gate")
    builder.add_conditional_edges("gate", lambda state: "gate" if state["done"] < gates else END)
    return builder


def langgraph_side(database: str, gates: int) -> LangGraphSide | None:
    try:
        from langgraph.types import Command
    except ImportError:
        return None
    scratch = tempfile.TemporaryDirectory(prefix="harbor-bench-langgraph-")
    if database == "sqlite":
        from langgraph.checkpoint.sqlite import SqliteSaver

        context: Any = SqliteSaver.from_conn_string(str(Path(scratch.name) / "langgraph.sqlite3"))
    else:
        from langgraph.checkpoint.postgres import PostgresSaver

        db = settings.DATABASES["default"]
        context = PostgresSaver.from_conn_string(
            make_conninfo(
                dbname=db["NAME"], user=db["USER"], password=db["PASSWORD"] or None, host=db["HOST"], port=db["PORT"]
            )
        )
    saver = context.__enter__()
    saver.setup()
    if database == "sqlite":
        # The durability Harbor's SQLite runs at (harbor_site.settings): WAL, synchronous=NORMAL,
        # so neither side waits for a disk flush and a slow disk does not decide the ratio.
        saver.conn.execute("PRAGMA journal_mode=WAL")
        saver.conn.execute("PRAGMA synchronous=NORMAL")
    graph = _graph(gates).compile(checkpointer=saver)
    plain_cursor = getattr(saver.conn, "cursor_factory", None)

    def config(thread: str) -> Any:
        return {"configurable": {"thread_id": thread}}

    def trace(callback: Callable[[str], None] | None) -> None:
        if database == "sqlite":
            saver.conn.set_trace_callback(callback)
        else:
            saver.conn.cursor_factory = _traced_cursor(callback) if callback else plain_cursor

    def close() -> None:
        context.__exit__(None, None, None)
        scratch.cleanup()

    return LangGraphSide(
        start=lambda thread: graph.invoke({"done": 0}, config(thread)),
        resume=lambda thread: graph.invoke(Command(resume="approve"), config(thread)),
        gates=gates,
        backend_pid=saver.conn.info.backend_pid if database != "sqlite" else 0,
        trace=trace,
        close=close,
    )


def _traced_cursor(callback: Callable[[str], None]) -> type:
    import psycopg

    class Traced(psycopg.Cursor):
        def execute(self, query: Any, params: Any = None, **kwargs: Any) -> Any:
            callback(str(query))
            return super().execute(query, params, **kwargs)

        def executemany(self, query: Any, params_seq: Any, **kwargs: Any) -> None:
            params_seq = list(params_seq)
            for _ in params_seq:
                callback(str(query))
            super().executemany(query, params_seq, **kwargs)

    return Traced
