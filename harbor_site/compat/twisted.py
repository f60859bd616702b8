"""Twisted's HTTP server internals the product relies on (Daphne serves HTTP through them).

- `request_target`: the target of a request's line, known before its body arrives (a
  request's own `uri` is set only once the whole body is in); Twisted keeps it on the
  channel, privately.
- `answer_bad_requests`: Twisted answers a request it cannot parse (a malformed
  Content-Length, a request line or header past its limits) with an empty 400 from a private
  method, or drops the connection; no hook lets the application word that answer."""

from collections.abc import Callable
from typing import Any

from twisted.web.http import HTTPChannel

from harbor_site.compat import Checked

CHECKED = Checked("twisted", lowest=(26, 10), below=(26, 11))  # read against 26.10.0


def request_target(channel: Any) -> bytes:  # an HTTPChannel
    """The target of the request whose headers the channel is reading (b"" if unknown)."""
    return getattr(channel, "_path", b"") or b""


def answer_bad_requests(answer: Callable[[Any], None]) -> None:
    """Have `answer(channel)` reply to every request Twisted refuses before the application
    sees it, and close the connection."""
    HTTPChannel._respondToBadRequestAndDisconnect = answer  # type: ignore[method-assign]
    HTTPChannel.lineLengthExceeded = answer  # type: ignore[method-assign,assignment]  # a line past MAX_LENGTH
