"""The demo travel desk as a live A2A server for tests: its own process on a free port,
started once per session (one that streams, one that only answers polls)."""

import os
import subprocess
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


def start_desk(*flags: str, env: dict[str, str] | None = None) -> Desk:
    port = free_port()
    env = {**os.environ, "HARBOR_TRAVEL_DESK_SLOW_SECONDS": "4", "PYTHONUNBUFFERED": "1", **(env or {})}
    process = subprocess.Popen(
        [PYTHON, "-m", "approvals.a2a.travel_desk", "--port", str(port), *flags],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError("the travel desk exited early")
        try:
            if httpx.get(f"{url}/.well-known/agent-card.json", timeout=2).status_code == 200:
                return Desk(url=url, process=process)
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
