"""The demo travel desk as a live A2A server for tests: its own process on a free port,
started once per session (one that streams, one that only answers polls), its tasks in a
store file of its own."""

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest

from tests.live import PYTHON, ROOT, free_port


@dataclass
class Desk:
    url: str
    process: subprocess.Popen
    args: list[str]  # how it was started, to start it again
    env: dict[str, str]
    scratch: str


def start_desk(*flags: str, env: dict[str, str] | None = None) -> Desk:
    port, scratch = free_port(), tempfile.mkdtemp(prefix="harbor-test-desk-")
    store = os.path.join(scratch, "travel-desk.sqlite3")
    args = [PYTHON, "-m", "approvals.a2a.travel_desk", "--port", str(port), "--store", store, *flags]
    env = {**os.environ, "HARBOR_TRAVEL_DESK_SLOW_SECONDS": "4", "PYTHONUNBUFFERED": "1", **(env or {})}
    url = f"http://127.0.0.1:{port}"
    return Desk(url=url, process=_launched(args, env, url), args=args, env=env, scratch=scratch)


def restart_desk(desk: Desk) -> None:
    """Stop the desk and start it again on its port and its store."""
    desk.process.terminate()
    desk.process.wait(timeout=10)
    desk.process = _launched(desk.args, desk.env, desk.url)


def _launched(args: list[str], env: dict[str, str], url: str) -> subprocess.Popen:
    """The desk's process, once it answers at `url`."""
    process = subprocess.Popen(
        args,
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError("the travel desk exited early")
        try:
            if httpx.get(f"{url}/.well-known/agent-card.json", timeout=2).status_code == 200:
                return process
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    process.kill()
    raise RuntimeError("the travel desk did not come up")


def stop_desk(desk: Desk) -> None:
    desk.process.terminate()
    try:
        desk.process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        desk.process.kill()
    shutil.rmtree(desk.scratch, ignore_errors=True)


@pytest.fixture(scope="session")
def travel_desk() -> Iterator[Desk]:
    desk = start_desk()
    yield desk
    stop_desk(desk)


@pytest.fixture(scope="session")
def polling_desk() -> Iterator[Desk]:
    desk = start_desk("--no-streaming")
    yield desk
    stop_desk(desk)
