"""Wake and round-trip latency (`python -m bench --wake --http`): how long after an approve
commits the gated tool's body starts, on a real Celery worker (PostgreSQL + Redis) and on
the embedded thread pool; and `POST /v1/control/approve` timed by a client through a real
Daphne with a real bearer token.

The gated tool of the `bench_wake` agent returns the wall-clock time of its first line,
which lands in the run's checkpoint; the approve's commit is stamped in this process by
wrapping the connection's commit (before any on-commit hook runs). Both clocks are this
machine's. A Celery worker learns the agent by importing this module (`--include`)."""

import os
import statistics
import subprocess
import sys
import time
from argparse import ArgumentParser
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from django.conf import settings
from django.db import connection

from approvals.models import Pause, PauseState
from runs.application import run_start, steering_submit
from runs.domain.tokens import token_unseal
from runs.identity.bearer_tokens import token_issue
from runs.identity.callers import Caller
from runs.models import Run, RunStatus, ToolCall
from runs.runtime import dispatch
from runs.runtime.planner import CallTool, Decision, Finish, PlannerView
from runs.runtime.registry import Agent, register_agent
from runs.runtime.tools import Tool, ToolContext

from . import streams
from .common import ROOT, free_port, percentile, start_daphne, stop, this_database

AGENT = "bench_wake"
Write = Callable[[str], None]


def _stamp(args: dict, ctx: ToolContext) -> dict:
    return {"started_at": time.time()}  # the tool body's first line


class _OneGate:
    def decide(self, view: PlannerView) -> Decision:
        return Finish("done") if view.history else CallTool("launch", {})


register_agent(
    Agent(
        id=AGENT,
        description="one gated call that records when its body starts",
        planner=_OneGate,
        tools={"launch": Tool("launch", _stamp, approval="always")},
    )
)


# --- helpers -------------------------------------------------------------------------------


def _figures(values: list[float]) -> str:
    return f"p50 {statistics.median(values):.1f} / p99 {percentile(values, 0.99):.1f} ms (n={len(values)})"


def _wait(predicate: Callable[[], bool], what: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.02)


@contextmanager
def _commit_clock() -> Iterator[list[float]]:
    """Wall-clock times at which this thread's connection committed, taken before the
    on-commit hooks (the wake-up among them) run."""
    stamps: list[float] = []
    original = connection.commit

    def commit() -> None:
        original()
        stamps.append(time.time())

    setattr(connection, "commit", commit)  # noqa: B010  (an instance attribute shadows the method)
    try:
        yield stamps
    finally:
        delattr(connection, "commit")


def _paused_runs(caller: Caller, count: int, agent: str, query: str, drive: Callable[[], object]) -> list[str]:
    ids = [run_start(caller=caller, query=query, agent_id=agent)[0].pk for _ in range(count)]
    drive()
    _wait(
        lambda: Pause.objects.filter(run_id__in=ids, state=PauseState.PAUSED).count() == len(ids),
        "the runs to reach their gate",
    )
    return ids


def _approve_to_start(caller: Caller, ids: list[str]) -> list[float]:
    """Approve each run in turn; ms from the approve's commit to its tool body's start."""
    spent = []
    for run_id in ids:
        with _commit_clock() as commits:
            steering_submit(caller=caller, run_id=run_id, method="approve", payload={})
        _wait(lambda: Run.objects.filter(pk=run_id, status=RunStatus.COMPLETE).exists(), "the approved run to finish")
        history = Run.objects.get(pk=run_id).checkpoint["history"]
        spent.append((history[-1]["result"]["started_at"] - commits[-1]) * 1000)
    return spent


# --- approve committed → the gated tool starts ------------------------------------------------------


def _celery_worker(log: Path, concurrency: int, pool: str = "prefork") -> tuple[subprocess.Popen, str]:
    node = f"bench-{os.getpid()}@localhost"
    env = {**os.environ, **this_database(), "HARBOR_EXECUTOR": "celery"}
    argv = [sys.executable, "-m", "celery", "-A", "harbor_site", "worker", "--loglevel", "WARNING"]
    argv += ["--pool", pool, "--concurrency", str(concurrency), "--without-gossip", "--without-mingle", "-n", node]
    argv += ["--include", __name__]
    out = open(log, "w")
    worker = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    out.close()
    return worker, node


def wake_rows(write: Write, caller: Caller, approvals: int, scratch: Path, concurrency: int, pool: str) -> None:
    if connection.vendor != "sqlite":
        from runs.tasks import dispatch as dispatch_task

        app = dispatch_task.app
        app.control.purge()
        worker, node = _celery_worker(scratch / "bench-worker.log", concurrency, pool)
        try:
            _wait(lambda: bool(app.control.ping(destination=[node], timeout=0.5)), "the Celery worker", timeout=60)
            settings.HARBOR_EXECUTOR = "celery"
            ids = _paused_runs(caller, approvals, AGENT, "launch", lambda: None)
            _approve_to_start(caller, ids[:3])  # warm the worker's processes
            spent = _approve_to_start(caller, ids[3:])
        finally:
            settings.HARBOR_EXECUTOR = "manual"
            stop(worker)
        write(f"  approve committed → gated tool starts, Celery + Redis ({pool} ×{concurrency})  {_figures(spent)}")
    settings.HARBOR_EXECUTOR = "thread"
    threads = dispatch.local_pool()
    threads.start()
    try:
        ids = _paused_runs(caller, approvals, AGENT, "launch", lambda: None)
        _approve_to_start(caller, ids[:3])
        spent = _approve_to_start(caller, ids[3:])
    finally:
        threads.stop()
        settings.HARBOR_EXECUTOR = "manual"
    write(f"  approve committed → gated tool starts, embedded pool          {_figures(spent)}")


# --- POST /v1/control/approve through Daphne ---------------------------------------------------------


def _token(caller: Caller, scratch: Path) -> tuple[str, dict[str, str]]:
    """A bearer token the server trusts: the development key on the embedded default; in
    production a key pair made here, its public half handed to the server."""
    identity: dict[str, Any] = dict(tenant=caller.tenant.slug, user=caller.user.username, session=caller.session)
    if settings.HARBOR_JWT_DEV_KEYS:
        return token_issue(**identity), {}
    key = ec.generate_private_key(ec.SECP256R1())
    public = scratch / "bench-jwt.pub"
    public.write_bytes(
        key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    return token_issue(**identity, private_key=key, issuer="harbor"), {
        "HARBOR_JWT_PUBLIC_KEYS": str(public),
        "HARBOR_JWT_ISSUER": "harbor",
    }


def http_rows(
    write: Write,
    caller: Caller,
    approvals: int,
    scratch: Path,
    port: int,
    concurrency: int,
    pool: str,
    stream_runs: int = 10,
    stream_count: int = 200,
) -> None:
    token, key_env = _token(caller, scratch)
    production = connection.vendor != "sqlite"
    env = {
        **os.environ,
        **this_database(),
        **key_env,
        "HARBOR_EXECUTOR": "celery" if production else "thread",
        "HARBOR_HTTPS": "0",
        "HARBOR_STATIC_ROOT": str(scratch / "static"),
        # The stream rows hold all their streams as one caller: past the per-person cap.
        "HARBOR_SSE_MAX_PER_USER": str(stream_count),
    }
    if production:
        env["DATABASE_URL"] = streams.named_database_url(env["DATABASE_URL"])
    url = f"http://127.0.0.1:{port}"
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    alone, alone_cpu = _requests_alone(
        caller, approvals, url, port, scratch, {**env, "HARBOR_EXECUTOR": "manual"}, headers
    )
    processes = [start_daphne("harbor_site.asgi:application", port, scratch / "bench-daphne.log", env)]
    if production:
        from runs.tasks import dispatch as dispatch_task

        dispatch_task.app.control.purge()
        worker, node = _celery_worker(scratch / "bench-worker.log", concurrency, pool)
        processes.append(worker)
    try:
        if production:
            _wait(lambda: bool(dispatch_task.app.control.ping(destination=[node], timeout=0.5)), "the worker")
        ids = _paused_runs(caller, approvals + 3, "deploy", "deploy build 42 to staging", dispatch.drain)
        # Measured one at a time: the run finishes before the next approve is sent.
        spent = _approve_each(
            url,
            headers,
            ids,
            then=lambda run_id: _wait(
                lambda: Run.objects.filter(pk=run_id, status=RunStatus.COMPLETE).exists(),
                "the approved run to finish",
            ),
        )
        idle = streams.idle_after()
        held = streams.idle_streams_row(url, {"Authorization": f"Bearer {token}"}, processes[0].pid, stream_count)
        live = streams.live_streams_row(
            url, {"Authorization": f"Bearer {token}"}, processes[0].pid, stream_count, stream_runs
        )
    finally:
        for process in processes:
            stop(process)
    executor = "Celery worker" if production else "embedded pool"
    write(f"  POST /v1/control/approve round trip, Daphne ({executor})         {_figures(spent)}")
    # The same approvals, server side: the decision's timestamp (written just before its
    # commit) to the gated call's ledger row (opened just before the tool body runs).
    decided = dict(Pause.objects.filter(run_id__in=ids[3:]).values_list("run_id", "decided_at"))
    opened = ToolCall.objects.filter(run_id__in=ids[3:], tool="deploy_to_production", attempt=1)
    woke = [
        (started - decided[run_id]).total_seconds() * 1000
        for run_id, started in opened.values_list("run_id", "started_at")
    ]
    write(f"    … the same approvals: decided → gated tool call opened ({executor}) {_figures(woke)}")
    write(
        f"    … with no run advancing beside it (the request alone) {_figures(alone)}; {alone_cpu:.1f} ms of Daphne CPU each"
    )
    if idle is not None:
        write(f"  idle PostgreSQL connections the Daphne keeps after that sequential client: {idle}")
    write(held)
    write(live)


def _approve_each(url: str, headers: dict[str, str], ids: list[str], then: Callable[[str], object]) -> list[float]:
    """POST /v1/control/approve for each paused run in turn, over one kept-alive connection:
    ms per round trip, the first three (which warm the server up) left out."""
    sealed = Pause.objects.filter(run_id__in=ids).values_list("run_id", "token_sealed")
    tokens = {run_id: token_unseal(token) for run_id, token in sealed}
    spent = []
    with httpx.Client(base_url=url, headers=headers, timeout=30) as client:
        for index, run_id in enumerate(ids):
            body = {"identity": {"run": run_id}, "payload": {"token": tokens[run_id]}}
            connection.close()  # as in production, no other process holds the database open
            began = time.perf_counter()
            response = client.post("/v1/control/approve", json=body)
            elapsed = (time.perf_counter() - began) * 1000
            if response.status_code != 200:
                raise RuntimeError(f"approve answered {response.status_code}: {response.text[:300]}")
            if index >= 3:
                spent.append(elapsed)
            then(run_id)
    return spent


def _requests_alone(
    caller: Caller, approvals: int, url: str, port: int, scratch: Path, env: dict[str, str], headers: dict[str, str]
) -> tuple[list[float], float]:
    """The approve request with nothing else running: a Daphne that advances no runs (the
    approved calls wait), so neither a worker nor the embedded pool shares the cores. Its
    CPU per approve, from /proc, is what the request costs the server."""
    ids = _paused_runs(caller, approvals + 3, "deploy", "deploy build 42 to staging", dispatch.drain)
    daphne = start_daphne("harbor_site.asgi:application", port, scratch / "bench-daphne-alone.log", env)
    try:
        began = streams.cpu_seconds(daphne.pid)
        spent = _approve_each(url, headers, ids, then=lambda run_id: time.sleep(0.005))
        cpu = (streams.cpu_seconds(daphne.pid) - began) * 1000 / len(ids)
    finally:
        stop(daphne)
    dispatch.drain()  # the approved runs end here, not on the next Daphne while it is timed
    return spent, cpu


# --- the command's side -------------------------------------------------------------------


def add_arguments(parser: ArgumentParser) -> None:
    parser.add_argument("--wake", action="store_true", help="approve committed → the gated tool starts")
    parser.add_argument("--http", action="store_true", help="POST /v1/control/approve through Daphne")
    parser.add_argument("--latency-only", action="store_true", help="only the --wake and --http rows")
    parser.add_argument("--approvals", type=int, default=100, help="approvals timed per latency row")
    parser.add_argument("--port", type=int, default=0, help="Daphne's port for --live and --http (default: a free one)")
    parser.add_argument("--worker-procs", type=int, default=2, help="Celery worker concurrency")
    parser.add_argument("--worker-pool", default="prefork", help="Celery worker pool (prefork, threads, solo)")
    parser.add_argument("--stream-runs", type=int, default=10, help="runs timed for the live streams' row")
    parser.add_argument(
        "--streams", type=int, default=200, help="GET /v1/events streams held open for the streams' rows"
    )


def rows(write: Write, caller: Caller, options: dict[str, Any]) -> None:
    approvals, procs, pool = max(1, options["approvals"]), options["worker_procs"], options["worker_pool"]
    scratch = Path(settings.VAR_DIR)
    if options["wake"]:
        wake_rows(write, caller, approvals + 3, scratch, procs, pool)
    if options["http"]:
        port = options["port"] or free_port()
        runs, count = max(1, options["stream_runs"]), max(1, options["streams"])
        http_rows(write, caller, approvals, scratch, port, procs, pool, stream_runs=runs, stream_count=count)
