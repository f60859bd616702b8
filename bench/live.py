"""The live figures of `python -m bench --live`: a pause committed → its frame on connected inbox
sockets, through a real Daphne serving Harbor's application on the configured database and
live transport (the in-memory channel layer on the embedded default, Redis pub/sub when
REDIS_URL is set).

Clients sign in with real session cookies (one person per socket: approvers, who receive the
resume token, and operators, who do not), send the Origin the application expects and listen
for what an inbox page listens for (its ?types=). The pause is parked inside the Daphne
process (bench.live_server) and the commit time taken there, right after the commit; each
client stamps a frame when its bytes arrive.

The clients speak just enough websocket (RFC 6455, unmasked server frames, pings answered)
to stamp arrival in the protocol callback: thousands of sockets in one process then add
little of their own parsing to the figure they measure."""

import asyncio
import base64
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import httpx
from django.conf import settings
from django.contrib.auth import get_user_model
from django.test import Client

from approvals.web.views import INBOX_EVENT_TYPES
from runs.application import run_start
from runs.domain import selectors
from runs.identity.callers import caller_resolve
from runs.identity.permissions import membership_grant
from runs.models import Membership, Role, Tenant

from .agents import ONE_GATE
from .common import free_port, percentile, start_daphne, stop, this_database

CONNECTS_IN_FLIGHT = 20  # Daphne drops a socket its application has not accepted in 5 s
PAUSE_MARK = b'"pause.requested"'


@dataclass
class Frames:
    """What one socket received: arrival time and bytes of each pause.requested frame."""

    pauses: list[tuple[float, bytes]] = field(default_factory=list)
    closed: bool = False
    texts: int = 0  # every text frame
    last: float = 0.0  # when the last one arrived


INBOX_PATH = f"/ws/events/?types={','.join(INBOX_EVENT_TYPES)}"


class BenchSocket(asyncio.Protocol):
    def __init__(self, host: str, port: int, cookie: str, path: str = INBOX_PATH) -> None:
        self.request = (
            f"GET {path} HTTP/1.1\r\n"
            f"Host: {host}:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Key: {base64.b64encode(os.urandom(16)).decode()}\r\nSec-WebSocket-Version: 13\r\n"
            f"Origin: http://{host}:{port}\r\nCookie: {settings.SESSION_COOKIE_NAME}={cookie}\r\n\r\n"
        ).encode()
        self.open: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self.buffer = b""
        self.upgraded = False
        self.frames = Frames()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        transport.write(self.request)

    def data_received(self, data: bytes) -> None:
        arrived = time.monotonic()
        self.buffer += data
        if not self.upgraded:
            head, found, rest = self.buffer.partition(b"\r\n\r\n")
            if not found:
                return
            self.upgraded = head.startswith(b"HTTP/1.1 101")
            if not self.open.done():
                self.open.set_result(self.upgraded)
            self.buffer = rest
        while (frame := self._frame()) is not None:
            opcode, payload = frame
            if opcode == 1:
                self.frames.texts += 1
                self.frames.last = arrived
                if PAUSE_MARK in payload:
                    self.frames.pauses.append((arrived, payload))
            elif opcode == 8:
                self.frames.closed = True
            elif opcode == 9 and self.transport is not None:  # ping: a masked pong (zero mask)
                self.transport.write(bytes([0x8A, 0x80 | len(payload)]) + b"\0\0\0\0" + payload)

    def _frame(self) -> tuple[int, bytes] | None:
        buffer = self.buffer
        if len(buffer) < 2:
            return None
        length, start = buffer[1] & 0x7F, 2
        if length == 126:
            length, start = int.from_bytes(buffer[2:4], "big"), 4
        elif length == 127:
            length, start = int.from_bytes(buffer[2:10], "big"), 10
        if len(buffer) < start + length:
            return None
        self.buffer = buffer[start + length :]
        return buffer[0] & 0x0F, buffer[start : start + length]

    def connection_lost(self, exc: Exception | None) -> None:
        self.frames.closed = True
        if not self.open.done():
            self.open.set_result(False)

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


def _rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def session_cookies(count: int, tenant_slug: str = "acme", role: Role | None = None) -> list[str]:
    """`count` people of the tenant, each signed in once: even ones approvers, odd ones
    operators (or all of `role`)."""
    users = get_user_model()
    tenant = Tenant.objects.get(slug=tenant_slug)
    cookies = []
    for index in range(count):
        user, _ = users.objects.get_or_create(username=f"bench-{tenant_slug}-{role or 'viewer'}-{index}")
        granted = role or (Role.APPROVER if index % 2 == 0 else Role.OPERATOR)
        if not Membership.objects.filter(tenant=tenant, user=user, role=granted).exists():
            membership_grant(tenant=tenant, user=user, role=granted)
        client = Client()
        client.force_login(user)
        cookies.append(client.cookies[settings.SESSION_COOKIE_NAME].value)
    return cookies


class LiveBench:
    def __init__(self, port: int, out: Callable[[str], object], log: str) -> None:
        self.host, self.port, self.out, self.log = "127.0.0.1", port, out, log
        self.url = f"http://{self.host}:{port}"
        self.sockets: list[BenchSocket] = []
        self.others: list[BenchSocket] = []  # open, but not timed (replaying the log)
        self.verbose = bool(os.environ.get("HARBOR_BENCH_VERBOSE"))

    async def connect(self, cookies: list[str], path: str = INBOX_PATH, *, counted: bool = True) -> None:
        """Open a socket per cookie; `counted` ones are those a pause is timed on."""
        loop = asyncio.get_running_loop()
        gate = asyncio.Semaphore(CONNECTS_IN_FLIGHT)

        async def one(cookie: str) -> BenchSocket:
            async with gate:
                _, protocol = await loop.create_connection(
                    lambda: BenchSocket(self.host, self.port, cookie, path), self.host, self.port
                )
                if not await asyncio.wait_for(protocol.open, 30):
                    raise RuntimeError(f"a websocket was refused (Daphne's log: {self.log})")
                await asyncio.sleep(0.01)  # let the socket take its cursor before the next opens
                return protocol

        opened = await asyncio.gather(*(one(cookie) for cookie in cookies))
        (self.sockets if counted else self.others).extend(opened)

    async def pause(
        self, api: httpx.AsyncClient, *, alone: bool = True, timeout: float = 60, tenant: str = "acme"
    ) -> list[float]:
        """Park one pause (in `tenant`: alone only); each socket's latency from its commit to
        its frame, in ms. Alone: on a run started a moment before (its event delivered); else
        at the end of the run loop's burst of events."""
        if alone:
            run = (await api.post(f"/__bench__/start?tenant={tenant}", timeout=120)).json()["run"]
            await asyncio.sleep(0.05 + len(self.sockets) / 10000)
            answer = (await api.post(f"/__bench__/park?run={run}", timeout=120)).json()
        else:
            answer = (await api.post("/__bench__/burst", timeout=120)).json()
        sequence, committed = answer["sequence"], answer["committed"]
        deadline = time.monotonic() + timeout
        latencies: list[float] = []
        waiting = list(self.sockets)
        while waiting and time.monotonic() < deadline:
            still = []
            for sock in waiting:
                arrived = next(
                    (t for t, payload in sock.frames.pauses if json.loads(payload)["sequence"] == sequence), None
                )
                if arrived is None:
                    if sock.frames.closed:
                        raise RuntimeError("a websocket closed during the benchmark")
                    still.append(sock)
                else:
                    latencies.append((arrived - committed) * 1000)
                    sock.frames.pauses.clear()
            waiting = still
            if waiting:
                await asyncio.sleep(0.02)
        if waiting:
            raise RuntimeError(f"{len(waiting)} of {len(self.sockets)} sockets had no frame after {timeout} s")
        if self.verbose:
            self.out(
                f"      {'alone' if alone else 'burst'} {len(latencies)}: {_p50_p99(latencies)} max {max(latencies):.1f}"
            )
        return latencies

    def close(self) -> None:
        for sock in self.sockets + self.others:
            sock.close()
        self.sockets, self.others = [], []


class Output(Protocol):
    def write(self, text: str) -> object: ...
    def flush(self) -> object: ...


def run_live_bench(
    *,
    stdout: Output,
    sizes: list[int],
    pauses: int,
    fanouts: int,
    port: int | None,
    layer: str,
    replays: int = 0,
    replay_events: int = 0,
) -> None:
    """Print the live rows: one socket over `pauses` pauses, one pause reaching each of
    `sizes` sockets (`fanouts` pauses per size; p50 / p99 over every socket of them), and
    (with `replays`) pauses reaching another tenant's socket while that many sockets replay
    acme's log of `replay_events` events."""

    def out(line: str) -> None:
        stdout.write(line + "\n")
        stdout.flush()

    cookies = session_cookies(max([1, *sizes]))
    port = port or free_port()
    log = tempfile.NamedTemporaryFile(prefix="bench-live-daphne-", suffix=".log", delete=False).name
    env = {**os.environ, **this_database()}
    daphne = start_daphne("bench.live_server:application", port, Path(log), env)
    try:
        bench = LiveBench(port, out, log)
        asyncio.run(_measure(bench, cookies, sizes, pauses, fanouts, daphne.pid, layer))
        if replays:
            replayers, observer = _replay_cookies(replays)
            expected = _seed_log(replay_events)
            asyncio.run(_measure_replays(bench, observer, replayers, expected, layer))
    finally:
        stop(daphne, timeout=10)
    os.unlink(log)  # kept when the run failed


async def _measure(
    bench: LiveBench, cookies: list[str], sizes: list[int], pauses: int, fanouts: int, pid: int, layer: str
) -> None:
    async with httpx.AsyncClient(base_url=bench.url) as api:
        await bench.connect(cookies[:1])
        await asyncio.sleep(0.5)
        await bench.pause(api)  # warm-up: imports, first renderings
        alone: list[float] = []
        burst: list[float] = []
        for _ in range(pauses):
            alone += await bench.pause(api)
            burst += await bench.pause(api, alone=False)
        bench.out(f"  pause committed → frame on one connected inbox socket ({layer}, {pauses} pauses), p50 / p99 ms:")
        bench.out(f"    alone in its transaction {_p50_p99(alone)};  at the end of its run's burst {_p50_p99(burst)}")
        bench.out(f"  one pause reaching every connected inbox socket ({layer}, {fanouts} pauses each), p50 / p99 ms:")
        for size in sizes:
            began = time.monotonic()
            await bench.connect(cookies[len(bench.sockets) : size])
            connected = time.monotonic() - began
            await asyncio.sleep(1.0)
            alone, burst = [], []
            for _ in range(fanouts):
                alone += await bench.pause(api)
                await asyncio.sleep(0.3)
                burst += await bench.pause(api, alone=False)
                await asyncio.sleep(0.3)
            bench.out(
                f"    {size:>5} sockets: alone {_p50_p99(alone)};  in its run's burst {_p50_p99(burst)};  "
                f"Daphne RSS {_rss_mb(pid):.0f} MB  (connected in {connected:.1f} s)"
            )
        bench.close()


def _p50_p99(values: list[float]) -> str:
    return f"{statistics.median(values):.1f} / {percentile(values, 0.99):.1f}"


REPLAY_PATH = "/ws/events/?after=0"  # the runs list of a page that reconnects after a long while
QUIET_PAUSES = 10


def _replay_cookies(count: int) -> tuple[list[str], str]:
    """`count` sockets' cookies for operators of acme, who see its whole log, each person
    holding as many as one may; and the cookie of the socket timed meanwhile, a globex approver."""
    per_person = settings.HARBOR_WS_MAX_PER_USER
    people = session_cookies(-(-count // per_person), role=Role.OPERATOR)
    return [cookie for cookie in people for _ in range(per_person)][:count], session_cookies(1, "globex")[0]


def _seed_log(count: int) -> int:
    """Acme's log grown to at least `count` events (pending runs: nothing drains them here);
    how many it holds."""
    alice = caller_resolve(tenant="acme", user="alice", session="bench")
    while selectors.events_head(tenant_id=alice.tenant.pk) < count:
        run_start(caller=alice, query="x", agent_id=ONE_GATE)
    return selectors.events_head(tenant_id=alice.tenant.pk)


async def _measure_replays(bench: LiveBench, observer: str, replayers: list[str], expected: int, layer: str) -> None:
    """Pauses timed on a globex socket, alone and while `replayers` acme sockets replay the
    whole log after ?after=0 (each of them receives `expected` frames)."""
    async with httpx.AsyncClient(base_url=bench.url) as api:
        await bench.connect([observer])
        await asyncio.sleep(0.5)
        await bench.pause(api, tenant="globex")  # warm-up
        quiet: list[float] = []
        for _ in range(QUIET_PAUSES):
            quiet += await bench.pause(api, tenant="globex")
        began = time.monotonic()
        replaying = asyncio.ensure_future(bench.connect(replayers, REPLAY_PATH, counted=False))
        during: list[float] = []
        deadline = began + 300
        while not (replaying.done() and all(sock.frames.texts >= expected for sock in bench.others)):
            if time.monotonic() > deadline:
                raise RuntimeError(f"the replays did not end in 300 s (Daphne's log: {bench.log})")
            during += await bench.pause(api, tenant="globex")
            await asyncio.sleep(0.05)
        took = max(sock.frames.last for sock in bench.others) - began
        bench.out(
            f"  a pause reaching another tenant's inbox socket while {len(replayers)} sockets replay "
            f"{expected} events ({layer}), p50 / p99 / max ms:"
        )
        bench.out(
            f"    quiet {_p50_p99(quiet)} / {max(quiet):.1f};  during the replays {_p50_p99(during)} / "
            f"{max(during):.1f} ({len(during)} pauses);  replays done in {took:.1f} s"
        )
        bench.close()
