"""Daphne's request handling, where Daphne has no hook of its own.

Daphne (over Twisted) receives a whole request body, into a temporary file past 100 kB,
before the ASGI application hears of the request, so an ASGI body limit comes too late to
spare the server a huge upload. In production a reverse proxy bounds bodies first; this is
the server's own bound (the embedded default runs without a proxy): `refuse_large_bodies`
refuses a body while it arrives, on its Content-Length as soon as the headers are in, or as
soon as a chunked body passes its limit, and hangs up.

It also turns Twisted's own parsing of form bodies off (a public parameter of Twisted's
Request, which Daphne does not pass): Daphne hands the raw body to the application and
never reads what Twisted parsed, and that parse ran on the event loop (a few MB of multipart
stalled every socket and request of the process for seconds)."""

from collections.abc import Callable
from typing import Any

from compat import Checked, twisted

CHECKED = Checked("daphne", lowest=(4, 2), below=(4, 3))  # read against 4.2.3

# The body limit of a request's target in bytes, or None for no limit.
LimitFor = Callable[[str], int | None]
# A refusal's Content-Type and body, for (target, the declared length or None, the limit).
Refusal = Callable[[str, int | None, int], tuple[bytes, bytes]]


def refuse_large_bodies(limit_for: LimitFor, refusal: Refusal) -> None:
    """Patch Daphne's request (once per process) to answer 413 with `refusal` for a body
    past `limit_for` its target. A server other than Daphne: nothing to do."""
    try:
        from daphne.http_protocol import WebRequest
    except ImportError:
        return
    if getattr(WebRequest, "harbor_body_limit", False):
        return
    init, got_length, handle_chunk, process = (
        WebRequest.__init__,
        WebRequest.gotLength,
        WebRequest.handleContentChunk,
        WebRequest.process,
    )

    def refuse(request: Any, declared: int | None) -> None:
        request.harbor_refused = True
        kind, body = refusal(request.harbor_target, declared, request.harbor_limit)
        request.channel.transport.write(
            b"HTTP/1.1 413 Request Entity Too Large\r\nContent-Type: %s\r\n"
            b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (kind, len(body), body)
        )
        request.channel.loseConnection()

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, parsePOSTFormSubmission=False, **kwargs)

    def gotLength(self: Any, length: int | None) -> None:
        # The request line is parsed (the channel holds its target); the body is not read yet.
        self.harbor_received, self.harbor_refused = 0, False
        self.harbor_target = twisted.request_target(self.channel).decode("latin-1")
        self.harbor_limit = limit_for(self.harbor_target)
        if self.harbor_limit is not None and length is not None and length > self.harbor_limit:
            got_length(self, 0)  # a tiny in-memory buffer, never filled
            return refuse(self, length)
        got_length(self, length)

    def handleContentChunk(self: Any, data: bytes) -> None:
        if getattr(self, "harbor_refused", False):
            return
        self.harbor_received = getattr(self, "harbor_received", 0) + len(data)
        bound = getattr(self, "harbor_limit", None)
        if bound is not None and self.harbor_received > bound:
            return refuse(self, None)
        handle_chunk(self, data)

    def guarded_process(self: Any) -> object:
        if not getattr(self, "harbor_refused", False):  # a refused request never reaches the app
            return process(self)
        return None

    WebRequest.__init__, WebRequest.gotLength, WebRequest.handleContentChunk, WebRequest.process = (
        __init__,
        gotLength,
        handleContentChunk,
        guarded_process,
    )
    WebRequest.harbor_body_limit = True
