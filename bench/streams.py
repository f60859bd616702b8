"""What a Daphne holds while it waits (`python -m bench --http`): the threads and database
connections of 200 idle `GET /v1/events` streams, and the idle PostgreSQL connections one
sequential client leaves behind; and what live streams cost it: its CPU time per event
delivered to 200 streams. Read from outside: the server's thread count and CPU time from
/proc, its connections from pg_stat_activity by the application name it connects with."""

import asyncio
import os
import time
from pathlib import Path
from typing import NamedTuple

import httpx
from django.db import connection

APPLICATION_NAME = "harbor-bench-daphne"  # how the benchmark's Daphne names its connections


def named_database_url(url: str) -> str:
    """DATABASE_URL for the benchmark's Daphne, its connections named APPLICATION_NAME."""
    return f"{url}{'&' if '?' in url else '?'}application_name={APPLICATION_NAME}"


def threads(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Threads:"):
            return int(line.split()[1])
    raise RuntimeError(f"no thread count for process {pid}")


def server_connections() -> tuple[int, int] | None:
    """PostgreSQL connections the Daphne holds, and how many of them are idle; None on SQLite."""
    if connection.vendor != "postgresql":
        return None
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*), count(*) FILTER (WHERE state = 'idle') FROM pg_stat_activity WHERE application_name = %s",
            [APPLICATION_NAME],
        )
        total, idle = cursor.fetchone()
        return int(total), int(idle)


def idle_streams_row(url: str, headers: dict[str, str], pid: int, count: int) -> str:
    """The row for `count` idle streams held open against the Daphne `pid` serving `url`."""
    before, during = asyncio.run(_hold_streams(url, headers, pid, count))
    row = f"  {count} idle GET /v1/events streams on one Daphne: threads {before.threads} → {during.threads}"
    if before.connections is None or during.connections is None:
        return row + "; database connections: none to count (SQLite)"
    (was, _), (now, idle) = before.connections, during.connections
    return row + f"; PostgreSQL connections {was} → {now} ({now - idle} busy)"


class Held(NamedTuple):
    threads: int
    connections: tuple[int, int] | None  # PostgreSQL's, and of them idle; None on SQLite


async def _held(pid: int) -> Held:
    return Held(threads(pid), await asyncio.to_thread(_connections_now))


async def _hold_streams(url: str, headers: dict[str, str], pid: int, count: int) -> tuple[Held, Held]:
    before = await _held(pid)
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=0)
    async with httpx.AsyncClient(base_url=url, headers=headers, limits=limits, timeout=30) as client:
        requests = [client.build_request("GET", "/v1/events") for _ in range(count)]
        streams = await asyncio.gather(*(client.send(request, stream=True) for request in requests))
        try:
            refused = [stream.status_code for stream in streams if stream.status_code != 200]
            if refused:
                raise RuntimeError(f"{len(refused)} streams refused: {sorted(set(refused))}")
            await asyncio.sleep(2.0)  # settled: setup threads returned, nothing but idle streams left
            during = await _held(pid)
        finally:
            await asyncio.gather(*(stream.aclose() for stream in streams))
    return before, during


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def live_streams_row(url: str, headers: dict[str, str], pid: int, count: int, runs: int = 10) -> str:
    """The Daphne's CPU time per event delivered to `count` live streams of the caller's
    own runs: runs with the streams open, less the same runs without them (on the embedded
    default the runs themselves execute in the Daphne too)."""
    alone, _ = asyncio.run(_runs_watched(url, headers, pid, 0, runs))
    watched, delivered = asyncio.run(_runs_watched(url, headers, pid, count, runs))
    per_event = (watched - alone) * 1000 / max(1, delivered // count)
    return (
        f"  a run's events reaching {count} live GET /v1/events streams: {per_event:.1f} ms of Daphne CPU"
        f" per event ({per_event * 1000 / count:.0f} µs per stream)"
    )


async def _runs_watched(url: str, headers: dict[str, str], pid: int, count: int, runs: int) -> tuple[float, int]:
    """The Daphne's CPU time over `runs` runs (each awaited), and the frames `count` streams
    received meanwhile."""
    frames = [0]

    async def watch(client: httpx.AsyncClient) -> None:
        async with client.stream("GET", "/v1/events") as stream:
            async for line in stream.aiter_lines():
                frames[0] += line.startswith("id: ")

    async def one(api: httpx.AsyncClient) -> None:
        body = {"identity": {}, "query": "count to 3", "agent_id": "countdown"}
        run = (await api.post("/v1/control/start", json=body)).json()["task_id"]
        while (await api.post("/v1/tasks/get", json={"identity": {"run": run}})).json()["status"] != "complete":
            await asyncio.sleep(0.25)

    limits = httpx.Limits(max_connections=None, max_keepalive_connections=0)
    timeout = httpx.Timeout(30, read=None)
    async with (
        httpx.AsyncClient(base_url=url, headers=headers, limits=limits, timeout=timeout) as client,
        httpx.AsyncClient(base_url=url, headers=headers, timeout=30) as api,
    ):
        watchers = [asyncio.create_task(watch(client)) for _ in range(count)]
        await asyncio.sleep(2.0)
        await one(api)  # warm
        await asyncio.sleep(1.0)
        began, seen = cpu_seconds(pid), frames[0]
        for _ in range(runs):
            await one(api)
        await asyncio.sleep(1.0)  # the last frames
        spent, delivered = cpu_seconds(pid) - began, frames[0] - seen
        for watcher in watchers:
            watcher.cancel()
        await asyncio.gather(*watchers, return_exceptions=True)
    return spent, delivered


def _connections_now() -> tuple[int, int] | None:
    try:
        return server_connections()
    finally:
        connection.close()  # this thread's own connection, opened for the count


def idle_after(seconds: float = 1.0) -> int | None:
    """Idle connections the Daphne keeps once a client has stopped sending."""
    time.sleep(seconds)
    counted = server_connections()
    return None if counted is None else counted[1]
