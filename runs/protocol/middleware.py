"""The front door: what is settled about a request before anything reads its body or
checks who sent it.

- `client_address`: the address a request came from, believing `X-Forwarded-For` only as
  far as it was written by proxies we run (HARBOR_TRUSTED_PROXIES), never the client's word.
- `ProtocolGuardMiddleware` (first in MIDDLEWARE): sets REMOTE_ADDR to that address, and
  answers /v1/ requests with a foreign Host, an oversized Content-Length or a query string
  past Django's field limit with the protocol's JSON error (PROTOCOL §7) instead of an
  HTML page, a 500 or a spooled body.
- `BodyLimit` (ASGI, around Django): Django's ASGI handler reads the whole body into a
  spooled file before any middleware runs; this refuses a /v1/ body on its Content-Length
  without reading it, and stops reading a chunked one as soon as it passes the limit.
"""

import ipaddress
import json
from collections.abc import Awaitable, Callable, Mapping
from functools import lru_cache
from typing import Any
from urllib.parse import unquote, urlsplit

from django.conf import settings
from django.core.exceptions import DisallowedHost, ImproperlyConfigured, TooManyFieldsSent
from django.http import HttpRequest, JsonResponse
from django.utils.deprecation import MiddlewareMixin

from runs.domain.payload import MAX_REQUEST_BYTES

PROTOCOL_PREFIX = "/v1/"
Scope = dict[str, Any]
Message = Mapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


@lru_cache(maxsize=8)
def trusted_networks(entries: tuple[str, ...]) -> tuple[Network, ...]:
    try:
        return tuple(ipaddress.ip_network(entry.strip(), strict=False) for entry in entries if entry.strip())
    except ValueError as error:
        raise ImproperlyConfigured(f"HARBOR_TRUSTED_PROXIES: {error}") from None


def _ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(text.strip())
    except ValueError:
        return None


def client_address(peer: str | None, forwarded_for: str, trusted: tuple[Network, ...]) -> str | None:
    """The client's address. `X-Forwarded-For` is read right to left — each proxy appends
    the address that connected to it — and only while the hop that wrote it is trusted; the
    first untrusted hop is the client. From an untrusted peer the header is ignored."""

    def is_trusted(ip: ipaddress.IPv4Address | ipaddress.IPv6Address | None) -> bool:
        return ip is not None and any(ip in network for network in trusted)

    address = peer
    if not is_trusted(_ip(peer or "")):
        return address
    for hop in reversed(forwarded_for.split(",")):
        ip = _ip(hop)
        if ip is None:  # garbage: keep the last address a trusted proxy vouched for
            break
        address = str(ip)
        if not is_trusted(ip):
            break
    return address


def split_target(target: str) -> tuple[str, str | None]:
    """A request target's path, and the authority it names when it came in absolute form
    (`POST http://host/v1/... HTTP/1.1`, which an HTTP/1.1 server must accept: RFC 9112
    §3.2.2), else None."""
    if not target.startswith(("http://", "https://")):
        return target, None
    parts = urlsplit(target)
    return parts.path or "/", parts.netloc.rpartition("@")[2]


def origin_form(scope: Scope) -> Scope:
    """An HTTP request whose target came in absolute form as if it came in origin form: its
    path alone, and the authority it named as its Host (checked against ALLOWED_HOSTS as any
    Host is). Without this such a request reached no route, and /v1/ answered it with
    Django's HTML page instead of the protocol's JSON."""
    path, authority = split_target(scope.get("path", ""))
    if authority is None:
        return scope
    headers = [(name, value) for name, value in scope.get("headers", []) if name.lower() != b"host"]
    return {
        **scope,
        "path": path,
        "raw_path": split_target(scope.get("raw_path", b"").decode("latin-1"))[0].encode("latin-1"),
        "headers": [*headers, (b"host", authority.encode("latin-1"))],
    }


def _error(status: int, code: str, message: str) -> JsonResponse:
    return JsonResponse({"code": code, "message": message}, status=status)


def _too_large(declared: int, limit: int = MAX_REQUEST_BYTES) -> str:
    return f"the body is {declared} bytes; the limit is {limit}"


class ProtocolGuardMiddleware(MiddlewareMixin):
    def process_request(self, request: HttpRequest) -> JsonResponse | None:
        trusted = trusted_networks(tuple(getattr(settings, "HARBOR_TRUSTED_PROXIES", ())))
        if trusted:
            request.META["HARBOR_PEER_ADDR"] = peer = request.META.get("REMOTE_ADDR")
            request.META["REMOTE_ADDR"] = client_address(peer, request.META.get("HTTP_X_FORWARDED_FOR", ""), trusted)
        if request.path == PROTOCOL_PREFIX.rstrip("/"):  # not redirected to /v1/ by an HTML page
            return _error(404, "not_found", f"no such route; the protocol's routes are under {PROTOCOL_PREFIX}")
        if not request.path.startswith(PROTOCOL_PREFIX):
            return None
        try:
            request.get_host()
        except DisallowedHost:
            return _error(400, "invalid_request", "the Host header names a host this server does not serve")
        try:
            request.GET  # parsed here, once: past the field limit it raises wherever it is first read
        except TooManyFieldsSent:
            limit = settings.DATA_UPLOAD_MAX_NUMBER_FIELDS
            return _error(400, "invalid_request", f"the query string has more than {limit} parameters")
        length = request.META.get("CONTENT_LENGTH") or ""
        if length:
            if not length.isdigit():
                return _error(400, "invalid_request", "Content-Length is not a number")
            if int(length) > MAX_REQUEST_BYTES:
                return _error(413, "request_too_large", _too_large(int(length)))
        return None


class BodyLimit:
    """ASGI middleware: bound /v1/ request bodies before Django reads them."""

    def __init__(self, app: ASGIApp, limit: int = MAX_REQUEST_BYTES) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope.get("path", "").startswith(PROTOCOL_PREFIX):
            return await self.app(scope, receive, send)
        length = dict(scope.get("headers") or []).get(b"content-length", b"")
        if length:
            if not length.isdigit():
                return await self._refuse(send, 400, "invalid_request", "Content-Length is not a number")
            if int(length) > self.limit:
                return await self._refuse(send, 413, "request_too_large", _too_large(int(length)))
        # Read what is there (chunked or not), but never past the limit.
        chunks, size, first = [], 0, None
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client went away: let Django see it
                first = message
                break
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > self.limit:
                return await self._refuse(send, 413, "request_too_large", f"the body is over {self.limit} bytes")
            if not message.get("more_body", False):
                break
        pending = [first or {"type": "http.request", "body": b"".join(chunks), "more_body": False}]

        async def replay() -> Message:
            return pending.pop() if pending else await receive()

        await self.app(scope, replay, send)

    @staticmethod
    async def _refuse(send: Send, status: int, code: str, message: str) -> None:
        body = json.dumps({"code": code, "message": message}).encode()
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    (b"connection", b"close"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})


def routed_path(target: str) -> str:
    """The path a raw request target reaches the application as: the server decodes its
    percent-escapes (`/%76%31/` is `/v1/`), so a bound read off the raw target must too."""
    return unquote(split_target(target)[0].partition("?")[0], errors="replace")


def body_limit(target: str) -> int | None:
    """The most body bytes a request to `target` may carry before the HTTP server hangs up
    (compat.daphne): a /v1/ one MAX_REQUEST_BYTES, any other Django's
    DATA_UPLOAD_MAX_MEMORY_SIZE (None: no limit)."""
    if routed_path(target).startswith(PROTOCOL_PREFIX):
        return MAX_REQUEST_BYTES
    return settings.DATA_UPLOAD_MAX_MEMORY_SIZE


def too_large(target: str, declared: int | None, limit: int) -> tuple[bytes, bytes]:
    """The HTTP server's 413 for a body past `body_limit` (its Content-Type and body): the
    protocol's JSON error under /v1/, a line of text elsewhere."""
    message = f"the body is over {limit} bytes" if declared is None else _too_large(declared, limit)
    if routed_path(target).startswith(PROTOCOL_PREFIX):
        return b"application/json", json.dumps({"code": "request_too_large", "message": message}).encode()
    return b"text/plain; charset=utf-8", f"Request body too large: {message}.\n".encode()
