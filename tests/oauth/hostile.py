"""Hostile OAuth providers: real HTTP servers on loopback, in a thread of the test process,
whose token endpoint answers as a peer Harbor cannot trust might: a byte at a time, without
end, too large, too deep, or with values no token has."""

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

Behaviour = Callable[[BaseHTTPRequestHandler], None]


@contextmanager
def hostile_provider(behaviour: Behaviour) -> Iterator[str]:
    """A server whose every POST is answered by `behaviour`; its base URL."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            try:
                behaviour(self)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up on us, as it should

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def answer(body: bytes, status: int = 200) -> Behaviour:
    """A prompt answer with this body (its length declared)."""

    def behave(handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(status)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)

    return behave


def streamed(chunk: bytes, total: int) -> Behaviour:
    """A token answer of `total` bytes sent as fast as the client reads, its length undeclared."""

    def behave(handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Connection", "close")
        handler.end_headers()
        handler.wfile.write(b'{"token_type": "Bearer", "access_token": "')
        sent = 0
        while sent < total:
            handler.wfile.write(chunk)
            sent += len(chunk)
        handler.wfile.write(b'"}')

    return behave


def trickle(every: float = 0.2, *, headers_too: bool = False, lasting: float = 120) -> Behaviour:
    """A token answer that comes a byte at a time, for minutes: each byte arrives well
    within any per-read timeout, so only a total deadline ends the wait."""

    def behave(handler: BaseHTTPRequestHandler) -> None:
        head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 60000\r\n\r\n"
        if headers_too:
            body = head + b'{"access_token": "' + b"a" * 59_000
        else:
            handler.wfile.write(head)
            handler.wfile.flush()
            body = b'{"access_token": "' + b"a" * 59_000
        ends = time.monotonic() + lasting
        for byte in body:
            if time.monotonic() > ends:
                return
            handler.wfile.write(bytes([byte]))
            handler.wfile.flush()
            time.sleep(every)

    return behave


def deep(levels: int) -> bytes:
    """A token answer whose extra member is nested `levels` deep."""
    return b'{"access_token": "at", "token_type": "Bearer", "extra": ' + b"[" * levels + b"]" * levels + b"}"
