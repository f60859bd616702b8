"""A bounded soak: 100 runs of three gated steps each, approved as fast as their pauses
open, while Celery workers are SIGKILLed at random and restarted. Nothing may be lost or
done twice: every run completes, every approval lands exactly once, every step's body
completes exactly once (the ledger), all in under three minutes."""

import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from tests.conftest import requires_postgres, requires_redis

from .client import (
    approve_until_answered,
    decision_landed,
    ledger,
    ledger_problems,
    open_pauses,
    runs_status,
    start_run,
)

pytestmark = [requires_postgres, requires_redis]

RUNS, GATES = 100, 3
MAX_KILLS = 8


class Killer(threading.Thread):
    """Every 1.5-3 s, SIGKILL a random worker (noting the steps it may have had in flight)
    and restart it half a second later, as a supervisor would. A restart costs seconds of
    CPU, so the kills stop at MAX_KILLS to keep the soak inside its time bound."""

    def __init__(self, topology, runs) -> None:
        super().__init__(daemon=True)
        self.topology, self.runs = topology, runs
        self.kills: list[str] = []
        self.in_flight: set[tuple[str, int]] = set()
        self.stopping = threading.Event()
        self.error: Exception | None = None

    def running(self) -> set:
        return {(run, step) for run, step, _, _, outcome in ledger(self.topology, self.runs) if outcome == "running"}

    def run(self) -> None:
        rng = random.Random(7)
        try:
            while len(self.kills) < MAX_KILLS and not self.stopping.wait(rng.uniform(1.5, 3)):
                name = rng.choice(self.topology.workers)
                self.in_flight |= self.running()
                self.topology.kill(name)
                self.in_flight |= self.running()
                self.kills.append(name)
                time.sleep(0.5)
                self.topology.start_process(name)
        except Exception as error:  # surfaced by the test
            self.error = error


def test_a_soak_of_gated_runs_under_worker_kills_loses_nothing_and_repeats_nothing(topology):
    began = time.monotonic()
    api = topology.api(timeout=60)
    with ThreadPoolExecutor(8) as pool:
        runs = list(
            pool.map(lambda _: start_run(api, f"work 0.2 seconds, {GATES} times, gated", "long_task"), range(RUNS))
        )
    killer = Killer(topology, runs)
    killer.start()
    answers: dict[str, list | None] = {}  # one decision per pause token, with every answer it got
    try:
        with ThreadPoolExecutor(8) as pool:
            while time.monotonic() - began < 170:
                statuses = runs_status(topology, runs)
                if all(s in ("complete", "failed", "cancelled") for s in statuses.values()):
                    break
                fresh = [p for p in open_pauses(api, runs) if p["token"] not in answers]
                for pause in fresh:
                    answers[pause["token"]] = None
                for pause, result in zip(
                    fresh, pool.map(lambda p: approve_until_answered(api, p["run"], p["token"]), fresh)
                ):
                    answers[pause["token"]] = result
                if not fresh:
                    time.sleep(0.2)
    finally:
        killer.stopping.set()
        killer.join(30)
        api.close()
    elapsed = time.monotonic() - began

    assert killer.error is None, killer.error
    assert len(killer.kills) >= 3, f"only {len(killer.kills)} worker kills: not a soak"
    statuses = runs_status(topology, runs)
    not_complete = {r: s for r, s in statuses.items() if s != "complete"}
    assert not not_complete, f"{len(not_complete)} runs lost or failed: {list(not_complete.items())[:5]}"
    assert elapsed < 180, f"the soak took {elapsed:.0f} s"

    undecided = {t[:12]: a for t, a in answers.items() if not decision_landed(a)}
    assert not undecided, f"decisions lost: {list(undecided.items())[:5]}"
    pauses = topology.sql(
        "SELECT run_id, state, decision, count(*) FROM approvals_pause WHERE run_id = ANY(%s) "
        "GROUP BY run_id, state, decision",
        (runs,),
    )
    assert sorted(pauses) == sorted((run, "resumed", "approve", GATES) for run in runs), (
        f"expected {GATES} approved gates per run, no gate asked twice: {[p for p in pauses if p[1:] != ('resumed', 'approve', GATES)][:5]}"
    )
    assert len(answers) == RUNS * GATES

    problems = ledger_problems(ledger(topology, runs), runs, steps=GATES, lost_allowed=killer.in_flight)
    assert problems == [], problems[:10]
    print(f"soak: {RUNS} runs x {GATES} gates in {elapsed:.0f} s, {len(killer.kills)} worker kills")
