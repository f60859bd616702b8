"""Small helpers every benchmark module shares: percentiles, a free port, starting and
stopping a Daphne."""

import os
import socket
import subprocess
import sys
import time
from collections.abc import Generator, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
from django.db import connection

ROOT = Path(__file__).resolve().parents[1]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(len(ordered) * q) - 1))]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def stop(process: subprocess.Popen, timeout: float = 20) -> None:
    process.terminate()
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


class RoundTrips:
    """What psycopg_round_trips counted: the answers waited for, and the seconds spent
    waiting on them (in any thread of the process)."""

    def __init__(self) -> None:
        self.count, self.waited = 0, 0.0


@contextmanager
def psycopg_round_trips() -> Iterator[RoundTrips]:
    """Count, while open, the answers this process's psycopg connections wait for from the
    server: round trips, whatever a statement log says (it shows BEGIN and COMMIT for a
    transaction sent as one autocommitted statement, and misses nothing else)."""
    import psycopg
    from psycopg.waiting import Wait

    counted = RoundTrips()
    plain = psycopg.Connection.wait

    def watched(gen: Generator[Any, Any, Any]) -> Generator[Any, Any, Any]:
        ready = None
        while True:
            try:
                step = gen.send(ready)
            except StopIteration as done:
                return done.value
            counted.count += step == Wait.R
            ready = yield step

    def wait(self: psycopg.Connection, gen: Generator[Any, Any, Any], *args: Any, **kwargs: Any) -> Any:
        began = time.perf_counter()
        try:
            return plain(self, watched(gen), *args, **kwargs)
        finally:
            counted.waited += time.perf_counter() - began

    psycopg.Connection.wait = wait  # type: ignore[method-assign,assignment]
    try:
        yield counted
    finally:
        psycopg.Connection.wait = plain  # type: ignore[method-assign]


def this_database() -> dict[str, str]:
    """The environment that points a child process at the database this one uses (under
    the tests, their test database rather than the configured one)."""
    name = str(connection.settings_dict["NAME"])
    if connection.vendor == "sqlite":
        return {"HARBOR_SQLITE_PATH": name}
    return {"DATABASE_URL": f"{os.environ['DATABASE_URL'].rsplit('/', 1)[0]}/{name}"}


def start_daphne(application: str, port: int, log: Path, env: Mapping[str, str] | None = None) -> subprocess.Popen:
    """Daphne serving `application` on 127.0.0.1:`port`, its output in `log`, once it
    answers /healthz (within 60 s)."""
    command = [sys.executable, "-m", "harbor_site.serve", "-b", "127.0.0.1", "-p", str(port), application]
    with open(log, "w") as out:
        server = subprocess.Popen(command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200:
                return server
        except httpx.TransportError:
            pass
        if server.poll() is not None:
            raise RuntimeError(f"daphne exited; its log: {log}")
        time.sleep(0.2)
    stop(server)
    raise RuntimeError(f"daphne did not answer /healthz in 60 s; its log: {log}")
