"""The house while its peers misbehave (`bin/bench --peers`): a remote agent that trickles
every answer holds runs of one tenant (globex), and an OAuth provider that trickles its
token answer holds that tenant's sign-in callbacks. Meanwhile another tenant (acme) starts
a deploy over /v1: how long until it parks on its approval gate, and how fast `/healthz`
answers. Both peers are real servers on loopback; Harbor is one Daphne on the mode the
bench runs on (the embedded pool, or Celery-less PostgreSQL with the embedded pool)."""

import asyncio
import json
import os
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import httpx
from django.conf import settings
from django.contrib.auth import get_user_model
from django.test import Client
from google.protobuf import json_format

from approvals.a2a.travel_desk.server import agent_card
from approvals.domain.selectors import pause_payload_shown
from approvals.models import Pause, PauseState
from runs.identity.bearer_tokens import token_issue
from runs.models import Run

from .common import free_port, percentile, start_daphne, stop, this_database

Write = Callable[[str], None]
BROWSER = {"Accept": "text/html,application/xhtml+xml"}


class TricklingPeer:
    """A remote agent and an OAuth provider in one loopback server: the agent's card and the
    provider's sign-in page answer at once; every JSON-RPC call and every token request is
    answered a byte a second."""

    def __init__(self) -> None:
        self.url, self.held = "", 0
        self._loop = asyncio.new_event_loop()

    def __enter__(self) -> "TricklingPeer":
        ready = threading.Event()
        threading.Thread(target=self._serve, args=(ready,), daemon=True).start()
        ready.wait(5)
        return self

    def __exit__(self, *_: object) -> None:
        asyncio.run_coroutine_threadsafe(self._hang_up(), self._loop).result(5)
        self._loop.call_soon_threadsafe(self._loop.stop)

    async def _hang_up(self) -> None:
        for handler in asyncio.all_tasks() - {asyncio.current_task()}:
            handler.cancel()

    def _serve(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self._loop)
        server = self._loop.run_until_complete(asyncio.start_server(self._handle, "127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
        ready.set()
        self._loop.run_forever()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = (await reader.readuntil(b"\r\n\r\n")).decode()
            verb, path, _ = head.split(" ", 2)
            if verb == "GET":
                card = json_format.MessageToDict(agent_card(self.url, streaming=False))
                body = json.dumps(card).encode() if path.startswith("/.well-known") else b"sign in"
                writer.write(_head(len(body)) + body)
                await writer.drain()
                return
            self.held += 1
            body = b"{" + b" " * 100_000 + b"}"
            writer.write(_head(len(body)))
            for byte in body:
                writer.write(bytes([byte]))
                await writer.drain()
                await asyncio.sleep(1)
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass
        finally:
            writer.close()


def _head(length: int) -> bytes:
    return f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {length}\r\n\r\n".encode()


def peer_rows(write: Write, *, delegations: int = 4, sign_ins: int = 21, deploys: int = 5) -> None:
    with TricklingPeer() as peer, tempfile.TemporaryDirectory(prefix="harbor-bench-peers-") as scratch:
        source = {
            "tenant": "globex",
            "name": "calendar",
            "display_name": "Calendar",
            "client_id": "harbor",
            "client_secret": "bench-secret",
            "authorize_url": f"{peer.url}/authorize",
            "token_url": f"{peer.url}/token",
            "scopes": ["calendar.read"],
        }
        env = {
            **os.environ,
            **this_database(),
            "HARBOR_EXECUTOR": "thread",
            "HARBOR_A2A_AGENTS": f"travel-desk={peer.url}",
            "HARBOR_OAUTH_SOURCES": json.dumps([source]),
        }
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        daphne = start_daphne("harbor_site.asgi:application", port, Path(scratch) / "daphne.log", env)
        pool = ThreadPoolExecutor(max_workers=sign_ins + 4)
        try:
            gina = {"Authorization": f"Bearer {token_issue(tenant='globex', user='gina', session='bench-peers')}"}
            alice = {"Authorization": f"Bearer {token_issue(tenant='acme', user='alice', session='bench-peers')}"}
            with httpx.Client(base_url=url, timeout=30) as http:
                waiting = [_start(http, gina, "calendar", "What is on my calendar?") for _ in range(sign_ins)]
                held = _sign_ins_held(url, waiting, pool)
                _wait(lambda: peer.held >= held, 30)
                started = sum(
                    _tried(lambda: _start(http, gina, "trip", "Book a flight to Lisbon")) for _ in range(delegations)
                )
            _wait(lambda: peer.held >= started + held, 30)
            write(
                f"  while {started} delegations and {held} sign-in callbacks wait on peers that trickle"
                " (a byte a second):"
            )
            with httpx.Client(base_url=url, timeout=2) as http:
                health = [_timed(lambda: http.get("/healthz").raise_for_status()) for _ in range(30)]
                parked = [_time_to_gate(http, alice) for _ in range(deploys)]
            write(f"    /healthz p50 / p99 / max: {_spread(health)} ms")
            write(
                "    another tenant's deploy from POST /v1/control/start to its gate p50 / max:"
                f" {statistics.median(parked):.0f} / {max(parked):.0f} ms (inf: no gate in 60 s)"
            )
        finally:
            stop(daphne)
            pool.shutdown(wait=False, cancel_futures=True)


def _start(http: httpx.Client, headers: dict[str, str], agent: str, query: str) -> str:
    answer = http.post("/v1/control/start", headers=headers, json={"identity": {}, "query": query, "agent_id": agent})
    answer.raise_for_status()
    return str(answer.json()["task_id"])


def _sign_ins_held(url: str, run_ids: list[str], pool: ThreadPoolExecutor) -> int:
    """Each run's sign-in begun in gina's browser, and its callback sent (not awaited): how
    many were sent."""
    if not _wait(lambda: Pause.objects.filter(run_id__in=run_ids, state=PauseState.PAUSED).count() == len(run_ids), 60):
        raise RuntimeError("the sign-in runs did not park")
    browser = Client()
    browser.force_login(get_user_model().objects.get(username="gina"))
    cookie = {settings.SESSION_COOKIE_NAME: browser.cookies[settings.SESSION_COOKIE_NAME].value}
    sent = 0
    with httpx.Client(base_url=url, timeout=30, cookies=cookie, headers=BROWSER) as http:
        for pause in Pause.objects.filter(run_id__in=run_ids):
            address = urlsplit(pause_payload_shown(pause, True)["AuthorizeURL"])  # on this Daphne's port
            begin = http.get(f"{address.path}?{address.query}", follow_redirects=False)
            if begin.status_code != 302:
                continue
            state = parse_qs(urlsplit(begin.headers["location"]).query)["state"][0]
            callback = f"{url}/v1/tools/oauth/callback?state={state}&code=bench"
            pool.submit(httpx.get, callback, cookies=cookie, headers=BROWSER, timeout=600)
            sent += 1
    return sent


def _time_to_gate(http: httpx.Client, headers: dict[str, str]) -> float:
    began = time.perf_counter()
    try:
        run_id = _start(http, headers, "deploy", "deploy build 42 to production")
    except httpx.HTTPError:
        return float("inf")
    if not _wait(lambda: Run.objects.filter(pk=run_id, status="paused").exists(), 60, every=0.005):
        return float("inf")
    return (time.perf_counter() - began) * 1000


def _timed(action: Callable[[], object]) -> float:
    began = time.perf_counter()
    try:
        action()
    except httpx.HTTPError:
        return float("inf")
    return (time.perf_counter() - began) * 1000


def _tried(action: Callable[[], object]) -> bool:
    """Whether Harbor answered (a site held by its peers does not)."""
    try:
        action()
    except httpx.HTTPError:
        return False
    return True


def _wait(predicate: Callable[[], bool], timeout: float, every: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(every)
    return True


def _spread(values: list[float]) -> str:
    spread = f"{statistics.median(values):.1f} / {percentile(values, 0.99):.1f} / {max(values):.1f}"
    unanswered = sum(value == float("inf") for value in values)
    return spread + (f" ({unanswered} of {len(values)} unanswered in 2 s)" if unanswered else "")
