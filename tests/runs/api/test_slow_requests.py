"""A real Daphne, started here with a short request deadline (HARBOR_HTTP_REQUEST_SECONDS):
connections that trickle a header line or a body byte every so often are hung up on once
the deadline passes, while a request that arrived whole, a websocket and a normal request
are not cut."""

import re
import socket
import subprocess
import time
from urllib.parse import urlsplit

import httpx
import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from tests.live import PYTHON, ROOT, _wait_healthy, free_port

from .conftest import mint

DEADLINE = 2.0


@pytest.fixture(scope="module")
def strict_server(live_harbor):
    """A second server on the live database, with a short deadline and no runtime of its own."""
    port = free_port()
    env = {
        **live_harbor.env,
        "HARBOR_HTTP_REQUEST_SECONDS": str(DEADLINE),
        "HARBOR_EXECUTOR": "manual",
        "HARBOR_SSE_KEEPALIVE_SECONDS": "1",
    }
    log = open(live_harbor.var_dir / "strict-server.log", "w")
    process = subprocess.Popen(
        [PYTHON, "-m", "harbor_site.serve", "-b", "127.0.0.1", "-p", str(port), "harbor_site.asgi:application"],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(url, [process])
        yield url
    finally:
        process.terminate()
        process.wait(10)
        log.close()


def _open(url: str) -> socket.socket:
    parts = urlsplit(url)
    sock = socket.create_connection((parts.hostname, parts.port or 80), timeout=10)
    sock.setblocking(False)
    return sock


def _closed(sock: socket.socket) -> bool:
    try:
        return sock.recv(4096) == b""
    except BlockingIOError:
        return False
    except ConnectionError:
        return True


def _trickle(socks: list[socket.socket], piece: bytes, seconds: float) -> list[bool]:
    """Send `piece` on every socket every half second for `seconds`; which the server closed."""
    closed = [False] * len(socks)
    until = time.monotonic() + seconds
    while time.monotonic() < until and not all(closed):
        for n, sock in enumerate(socks):
            if not closed[n]:
                try:
                    sock.send(piece)
                except OSError:
                    closed[n] = True
                    continue
                closed[n] = _closed(sock)
        time.sleep(0.5)
    return closed


def test_a_request_trickling_its_headers_or_body_is_hung_up_on(strict_server):
    heads = [_open(strict_server) for _ in range(30)]
    bodies = [_open(strict_server) for _ in range(10)]
    for sock in heads:
        sock.send(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")
    for sock in bodies:
        sock.send(b"POST /v1/tasks/list HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1000\r\n\r\n")
    started = time.monotonic()
    closed = _trickle(heads, b"X-Slow: 1\r\n", 4 * DEADLINE) + _trickle(bodies, b"{", 4 * DEADLINE)
    assert all(closed), f"{closed.count(False)} slow connections still open"
    assert time.monotonic() - started < 8 * DEADLINE
    for sock in heads + bodies:
        sock.close()
    assert httpx.get(f"{strict_server}/healthz", timeout=5).status_code == 200  # whole requests still served


def test_a_keep_alive_connection_serves_requests_and_a_websocket_outlives_the_deadline(strict_server, live_harbor):
    with httpx.Client(base_url=strict_server, timeout=5) as client:
        for _ in range(3):  # one connection, kept alive between requests
            assert client.get("/healthz").status_code == 200
        page = client.get("/login/")
        csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text)
        assert csrf is not None
        signed = client.post(
            "/login/",
            data={"username": "olivia", "password": live_harbor.logins["olivia"], "csrfmiddlewaretoken": csrf[1]},
        )
        assert signed.status_code == 302
        cookie = "; ".join(f"{name}={value}" for name, value in client.cookies.items())
    ws_url = strict_server.replace("http://", "ws://") + "/ws/events/"
    with connect(ws_url, additional_headers={"Cookie": cookie, "Origin": strict_server}, open_timeout=5) as ws:
        time.sleep(2 * DEADLINE)
        try:
            ws.recv(timeout=DEADLINE)  # no event is due: a timeout, not a close
        except TimeoutError:
            pass
        except ConnectionClosed as closed:
            raise AssertionError(f"the websocket was closed: {closed}") from None
        ws.ping().wait(5)


def test_an_event_stream_outlives_the_deadline(strict_server, live_harbor):
    headers = {"Authorization": f"Bearer {mint('olivia', 'slow')}", "Accept": "text/event-stream"}
    with httpx.stream("GET", f"{strict_server}/v1/events", headers=headers, timeout=10) as response:
        assert response.status_code == 200
        opened, keepalives = time.monotonic(), 0
        for line in response.iter_lines():  # ends if the server hangs up
            keepalives += line == ": keepalive"
            if time.monotonic() - opened > 3 * DEADLINE:
                break
        assert time.monotonic() - opened > 3 * DEADLINE and keepalives >= 3
