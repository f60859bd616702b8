"""Against a live Daphne: a large /v1/ body is refused as it arrives, not after the server
has buffered all of it (Twisted writes a body past 100 kB to a temporary file first), and
a foreign Host gets the protocol's JSON error, not a page."""

import json
import socket
import time
from urllib.parse import urlsplit

import httpx


def _connect(live_harbor) -> socket.socket:
    url = urlsplit(live_harbor.url)
    sock = socket.create_connection((url.hostname, url.port), timeout=10)
    sock.settimeout(10)
    return sock


def _response(sock) -> tuple[int, dict]:
    data = b""
    while b"\r\n\r\n" not in data or len(data.split(b"\r\n\r\n", 1)[1]) < int(
        dict(line.split(b": ", 1) for line in data.split(b"\r\n\r\n")[0].split(b"\r\n")[1:]).get(
            b"Content-Length", b"0"
        )
    ):
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split(b" ")[1]), json.loads(body)


def _headers(path: str, extra: str) -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n{extra}\r\n").encode()


def test_a_declared_huge_body_is_refused_before_it_is_sent(live_harbor):
    with _connect(live_harbor) as sock:
        sock.sendall(_headers("/v1/control/start", f"Content-Length: {1024**3}\r\n"))
        started = time.monotonic()
        status, body = _response(sock)  # no body sent at all: the answer comes on the headers
    assert (status, body["code"]) == (413, "request_too_large")
    assert time.monotonic() - started < 5


def test_a_chunked_body_is_cut_off_past_the_limit(live_harbor):
    chunk = b"x" * 16384
    sent = 0
    with _connect(live_harbor) as sock:
        sock.sendall(_headers("/v1/control/start", "Transfer-Encoding: chunked\r\n"))
        try:
            while sent < 64 * 1024 * 1024:
                sock.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                sent += len(chunk)
        except (BrokenPipeError, ConnectionResetError):
            pass
        status, body = _response(sock)
    assert (status, body["code"]) == (413, "request_too_large")
    assert sent < 16 * 1024 * 1024  # the server hung up long before the 64 MiB were sent


def test_a_foreign_host_is_a_json_400_even_with_debug_pages_on(live_harbor):
    # The embedded live server runs with DEBUG on, where Django would show its debug page.
    response = httpx.post(f"{live_harbor.url}/v1/tasks/list", content=b"{}", headers={"Host": "evil.example"})
    assert response.headers["Content-Type"].startswith("application/json")
    assert (response.status_code, response.json()["code"]) == (400, "invalid_request")
