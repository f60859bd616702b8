"""Small helpers every benchmark module shares: percentiles, a free port, starting and
stopping a Daphne."""

import os
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

import httpx
from django.db import connection

ROOT = Path(__file__).resolve().parents[3]


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
    command = [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), application]
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
