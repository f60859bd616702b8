"""Twisted's HTTP server internals the product relies on (Daphne serves HTTP through them).

- `request_target`: the target of a request's line, known before its body arrives (a
  request's own `uri` is set only once the whole body is in); Twisted keeps it on the
  channel, privately.
- `answer_bad_requests`: Twisted answers a request it cannot parse (a malformed
  Content-Length, a request line or header past its limits) with an empty 400 from a private
  method, or drops the connection; no hook lets the application word that answer.
- `bound_request_time`: Twisted's only timeout for a request on its way in is an idle one
  (`timeOut`, restarted by every byte), so a client sending a header line or a body byte
  every few seconds held its connection, and the server's memory for it, for ever. Twisted
  has no public hook for a deadline on a whole request; its channel's public methods
  (`connectionMade`, `allContentReceived`, `requestDone`, `connectionLost`) mark the
  moments one starts and ends."""

from collections.abc import Callable
from typing import Any

from twisted.web.http import HTTPChannel

from compat import Checked

CHECKED = Checked("twisted", lowest=(26, 10), below=(26, 11))  # read against 26.10.0


def request_target(channel: Any) -> bytes:  # an HTTPChannel
    """The target of the request whose headers the channel is reading (b"" if unknown)."""
    return getattr(channel, "_path", b"") or b""


def answer_bad_requests(answer: Callable[[Any], None]) -> None:
    """Have `answer(channel)` reply to every request Twisted refuses before the application
    sees it, and close the connection."""
    HTTPChannel._respondToBadRequestAndDisconnect = answer  # type: ignore[method-assign]
    HTTPChannel.lineLengthExceeded = answer  # type: ignore[method-assign,assignment]  # a line past MAX_LENGTH


def bound_request_time(seconds: float) -> None:
    """A connection has `seconds` to deliver a whole request (its line, headers and body)
    from when it opens or its last response ends (a keep-alive wait counts); past that it is
    timed out as Twisted times out an idle one. While a request is handled (a long response,
    an event stream, a websocket after its upgrade) no deadline runs. Once per process; a
    second call only changes `seconds`."""
    if getattr(HTTPChannel, "harbor_request_seconds", None) is not None:
        HTTPChannel.harbor_request_seconds = seconds  # type: ignore[attr-defined]
        return
    HTTPChannel.harbor_request_seconds = seconds  # type: ignore[attr-defined]
    connection_made, all_content_received, request_done, connection_lost = (
        HTTPChannel.connectionMade,
        HTTPChannel.allContentReceived,
        HTTPChannel.requestDone,
        HTTPChannel.connectionLost,
    )

    def disarm(channel: Any) -> None:
        deadline = getattr(channel, "harbor_deadline", None)
        if deadline is not None and deadline.active():
            deadline.cancel()
        channel.harbor_deadline = None

    def too_slow(channel: Any) -> None:
        channel.harbor_deadline = None
        channel.timeoutConnection()  # Twisted's own: lose the connection, abort it if it lingers

    def arm(channel: Any) -> None:
        disarm(channel)
        channel.harbor_deadline = channel.callLater(HTTPChannel.harbor_request_seconds, too_slow, channel)  # type: ignore[attr-defined]

    def connectionMade(self: Any) -> None:
        connection_made(self)
        arm(self)

    def allContentReceived(self: Any) -> None:
        disarm(self)
        all_content_received(self)

    def requestDone(self: Any, request: Any) -> None:
        request_done(self, request)
        if self.persistent and self.transport is not None and not self.transport.disconnecting:
            arm(self)  # the next request, if any, has its own deadline

    def connectionLost(self: Any, reason: Any) -> None:
        disarm(self)
        connection_lost(self, reason)

    HTTPChannel.connectionMade = connectionMade  # type: ignore[method-assign]
    HTTPChannel.allContentReceived = allContentReceived  # type: ignore[method-assign]
    HTTPChannel.requestDone = requestDone  # type: ignore[method-assign]
    HTTPChannel.connectionLost = connectionLost  # type: ignore[method-assign]
