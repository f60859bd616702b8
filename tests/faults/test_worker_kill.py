"""A Celery worker is SIGKILLed (with its pool child) in the middle of a long tool call,
with a one-second lease: its run is taken over from its checkpoint, every run completes,
and the tool-call ledger shows each step's body completed exactly once."""

import time

from tests.conftest import requires_postgres, requires_redis

from .client import ledger, ledger_problems, start_run, wait_runs

pytestmark = [requires_postgres, requires_redis]

ROUNDS = 4


def in_flight(topology, runs) -> set[tuple[str, int]]:
    return {(run, step) for run, step, _, _, outcome in ledger(topology, runs) if outcome == "running"}


def test_a_worker_killed_mid_tool_loses_no_step_and_runs_none_twice(topology):
    assert topology.env["HARBOR_LEASE_SECONDS"] == "1"
    with topology.api() as api:
        runs = [start_run(api, f"work 3 seconds, {ROUNDS} times", "long_task") for _ in range(2)]

    # Both workers inside a `work` body past its first round, a second into it (well past the lease).
    deadline = time.monotonic() + 45
    while not (len(busy := in_flight(topology, runs)) == 2 and all(step >= 1 for _, step in busy)):
        assert time.monotonic() < deadline, f"the workers never ran both tools at once: {ledger(topology, runs)}"
        time.sleep(0.2)
    time.sleep(1.2)
    hit = in_flight(topology, runs)
    topology.kill("worker0")
    hit |= in_flight(topology, runs)  # a step that started between the two reads
    time.sleep(1.5)  # a supervisor restarts it; the lease is long gone by then
    topology.start_process("worker0")

    wait_runs(topology, runs, "complete", timeout=90)
    rows = ledger(topology, runs)
    assert ledger_problems(rows, runs, steps=ROUNDS, lost_allowed=hit) == []
    lost = [row for row in rows if row[4] == "lost"]
    assert len(lost) == 1, f"the killed worker's attempt must show as the one lost attempt: {rows}"
    assert {row[3] for row in rows} == {"work"}
    answers = topology.sql("SELECT answer FROM runs_run WHERE id = ANY(%s)", (runs,))
    assert answers == [(f"Worked {ROUNDS} round(s) of 3.0 s each.",)] * 2
