"""The benchmarks' command line (`python -m bench`, run by bin/bench and bin/bench-live).

By default: pause + decide cycles against LangGraph's `interrupt` + `Command(resume)` on
the same database (bench.cycles), then the reads that grow with history (bench.reads).
Min / median / max over rounds, the two sides alternating round by round (machines are
noisy). `--live` prints only the live figures instead: a pause committed → its frame on 1
to 2,000 inbox sockets of a real Daphne (bench.live); `--latency-only` only the wake and
HTTP rows (bench.wake)."""

import statistics
import sys
import time
from argparse import ArgumentParser
from collections.abc import Callable
from typing import TextIO

from django.conf import settings
from django.db import connection

from harbor_site.sqlite_wal import keep_wal_open
from runs.identity.callers import caller_resolve

from . import cycles as cycle_bench
from . import reads
from . import wake as latency
from .cycles import APPROVER, OWNER, STATEMENT_CEILING, TENANT, CycleFigures
from .live import run_live_bench
from .peers import peer_rows
from .seed import seed_history


def parser() -> ArgumentParser:
    parser = ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cycles", type=int, default=100, help="cycles (gates decided) per round")
    parser.add_argument("--gates", type=int, default=5, help="gated calls in a row per run")
    parser.add_argument(
        "--no-ceiling", action="store_true", help="print the statements per cycle without failing above the ceiling"
    )
    parser.add_argument("--history", type=int, default=300, help="decided pauses to make for the read figures")
    parser.add_argument(
        "--seed", type=int, default=0, help="bulk-write this many more pauses (1%% open) before the read figures"
    )
    parser.add_argument("--reads-only", action="store_true", help="skip the cycle figures")
    parser.add_argument(
        "--peers", action="store_true", help="only the figures while a remote agent and an OAuth provider trickle"
    )
    parser.add_argument("--live", action="store_true", help="only the live figures: pause → inbox socket frames")
    parser.add_argument("--sockets", default="500,1000,2000", help="--live: socket counts, comma-separated")
    parser.add_argument("--live-pauses", type=int, default=50, help="--live: pauses timed on one socket")
    parser.add_argument("--live-fanouts", type=int, default=3, help="--live: pauses timed per socket count")
    parser.add_argument(
        "--replays", type=int, default=150, help="--live: sockets of one tenant replaying its log (0: skip the row)"
    )
    parser.add_argument("--replay-events", type=int, default=1500, help="--live: the log they replay")
    latency.add_arguments(parser)
    return parser


def main(argv: list[str], stdout: TextIO = sys.stdout, stderr: TextIO = sys.stderr) -> int:
    """Print the figures asked for; 1 when a cycle sent more statements than the ceiling."""
    options = vars(parser().parse_args(argv))

    def write(line: str) -> None:
        stdout.write(line + "\n")

    settings.HARBOR_EXECUTOR = "manual"  # steps run in this thread, when drain() is called
    keep_wal_open()  # SQLite: as the server process does (its log held open, checkpointed off the commits)
    database = connection.vendor
    if options["peers"]:
        write(f"Harbor while its peers misbehave, on {database}, one Daphne with the embedded pool")
        peer_rows(write)
        return 0
    if options["live"]:
        layer = "redis pub/sub" if settings.HARBOR_LIVE_REDIS_URL else "in-memory channel layer"
        write(f"Harbor live benchmark on {database}, {layer}, one Daphne")
        run_live_bench(
            stdout=stdout,
            sizes=[int(size) for size in options["sockets"].split(",") if size],
            pauses=options["live_pauses"],
            fanouts=options["live_fanouts"],
            replays=options["replays"],
            replay_events=options["replay_events"],
            port=options["port"] or None,
            layer=layer,
        )
        return 0
    member = caller_resolve(tenant=TENANT, user=OWNER, session="bench")
    approver = caller_resolve(tenant=TENANT, user=APPROVER, session="bench")
    if options["latency_only"]:
        write(f"Harbor latency on {database}")
        latency.rows(write, member, options)
        return 0
    rounds, cycles, gates = options["rounds"], options["cycles"], options["gates"]
    write(
        f"Harbor benchmark on {database} ({rounds} rounds of {cycles} cycles, runs of {gates} gated calls; "
        "min / median / max)"
    )
    failed = False
    if not options["reads_only"]:
        figures = cycle_bench.measure(rounds=rounds, cycles=cycles, gates=gates)
        failed = _cycle_rows(write, figures, database) and not options["no_ceiling"]
    cycle_bench.ours_round(options["history"], 1)  # history: decided pauses, what unbounded reads grow with
    seed = options["seed"]
    if seed:
        began = time.perf_counter()
        seed_history(
            caller=member,
            count=seed,
            decider=approver.user,
            progress=lambda n: stderr.write(f"  seeded {n}/{seed}\r"),
        )
        stderr.write(f"\n  seeded {seed} pauses in {time.perf_counter() - began:.0f} s\n")
    reads.rows(write, member, approver, options["history"] + seed)
    latency.rows(write, member, options)
    return 1 if failed else 0


def _spread(values: list[float]) -> str:
    return f"{min(values):.1f} / {statistics.median(values):.1f} / {max(values):.1f}"


def _cycle_rows(write: Callable[[str], None], figures: CycleFigures, database: str) -> bool:
    """Print the cycle rows; whether a cycle sent more statements than the ceiling."""
    write("  pause + decide cycles/s as requests make them (approver resolved, approve, the step to the next gate)")
    ratio = f"  (÷ LangGraph = {figures.ratio:.2f}×)" if figures.ratio is not None else ""
    write(f"    ours        {_spread(figures.ours)}{ratio}")
    if figures.langgraph:
        write(f"    LangGraph   {_spread(figures.theirs)}")
    else:
        write("    LangGraph: not installed (pip install -e '.[bench]')")
    theirs = f", LangGraph {figures.theirs_statements}" if figures.theirs_statements is not None else ""
    over = figures.statements > STATEMENT_CEILING
    write(
        f"  statements per cycle (all Django sends, BEGIN, COMMIT and savepoints included): ours {figures.statements}"
        f"{' — over' if over else ' (under'} the ceiling of {STATEMENT_CEILING}{'' if over else ')'}{theirs}"
    )
    if database == "postgresql":
        theirs_trips = f", LangGraph {figures.theirs_round_trips}" if figures.theirs_round_trips is not None else ""
        write(f"  round trips to PostgreSQL per cycle: ours {figures.round_trips}{theirs_trips}")
        theirs_split = f", LangGraph {figures.theirs_split}" if figures.theirs_split else ""
        write("  a cycle's ms over a round: wall / waiting for PostgreSQL / its server process's CPU / our CPU")
        write(f"    ours {figures.split}{theirs_split}")
    return over
