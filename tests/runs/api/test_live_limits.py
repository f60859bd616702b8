"""Against a live Daphne: a large body is refused as it arrives, not after the server has
buffered all of it (Twisted writes a body past 100 kB to a temporary file first), a form
body is Django's alone to parse, and a foreign Host gets the protocol's JSON error, not a
page."""

import http.client
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


def _raw_response(sock) -> tuple[bytes, bytes]:
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
    return head, body


def _response(sock) -> tuple[int, dict]:
    head, body = _raw_response(sock)
    return int(head.split(b" ")[1]), json.loads(body)


def _headers(path: str, extra: str, kind: str = "application/json") -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: {kind}\r\n{extra}\r\n").encode()


def test_a_declared_huge_body_is_refused_before_it_is_sent(live_harbor):
    with _connect(live_harbor) as sock:
        sock.sendall(_headers("/v1/control/start", f"Content-Length: {1024**3}\r\n"))
        started = time.monotonic()
        status, body = _response(sock)  # no body sent at all: the answer comes on the headers
    assert (status, body["code"]) == (413, "request_too_large")
    assert time.monotonic() - started < 5


def test_a_percent_encoded_protocol_path_gets_the_protocol_body_limit(live_harbor):
    """`/%76%31/` reaches the protocol as `/v1/`: its body is bounded as one, on the
    headers, not buffered up to the pages' 2.5 MB."""
    with _connect(live_harbor) as sock:
        sock.sendall(_headers("/%76%31/tasks/list", f"Content-Length: {1024**2}\r\n"))
        status, body = _response(sock)  # no body sent at all: the answer comes on the headers
    assert (status, body["code"]) == (413, "request_too_large")


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


def test_a_page_body_past_the_form_limit_is_refused_before_it_is_sent(live_harbor):
    with _connect(live_harbor) as sock:
        sock.sendall(_headers("/login/", f"Content-Length: {1024**3}\r\n", "multipart/form-data; boundary=b"))
        head, body = _raw_response(sock)  # no body sent: the answer comes on the headers
    assert head.startswith(b"HTTP/1.1 413 ")
    assert b"the limit is 2621440" in body  # Django's DATA_UPLOAD_MAX_MEMORY_SIZE


def test_a_form_body_is_parsed_by_django_alone(live_harbor):
    # Twisted would parse it too, on the event loop every socket shares (seconds for a few MB
    # of multipart), and answer a malformed one itself: a bare 400, none of Django's headers.
    body = b"not a multipart body"
    with _connect(live_harbor) as sock:
        sock.sendall(_headers("/login/", f"Content-Length: {len(body)}\r\n", "multipart/form-data") + body)
        head, _ = _raw_response(sock)
    assert head.startswith(b"HTTP/1.1 403 ")  # Django's CSRF check: the request reached the app
    assert b"Content-Security-Policy" in head


def test_a_foreign_host_is_a_json_400_even_with_debug_pages_on(live_harbor):
    # The embedded live server runs with DEBUG on, where Django would show its debug page.
    response = httpx.post(f"{live_harbor.url}/v1/tasks/list", content=b"{}", headers={"Host": "evil.example"})
    assert response.headers["Content-Type"].startswith("application/json")
    assert (response.status_code, response.json()["code"]) == (400, "invalid_request")


def test_a_target_in_absolute_form_reaches_the_protocol(live_harbor):
    # RFC 9112 §3.2.2: a server accepts `POST http://host/path`, and the authority, not the
    # Host header, names the host.
    url = urlsplit(live_harbor.url)
    for target, status, code in [
        (f"http://{url.netloc}/v1/tasks/list", 401, "identity_required"),  # as `POST /v1/tasks/list`
        ("http://evil.example/v1/tasks/list", 400, "invalid_request"),  # a foreign host
    ]:
        client = http.client.HTTPConnection(url.hostname, url.port, timeout=10)
        client.putrequest("POST", target, skip_host=True)
        for name, value in (("Host", url.netloc), ("Content-Type", "application/json"), ("Content-Length", "2")):
            client.putheader(name, value)
        client.endheaders(b"{}")
        response = client.getresponse()
        assert response.getheader("Content-Type", "").startswith("application/json")
        assert (response.status, json.loads(response.read())["code"]) == (status, code)
        client.close()
