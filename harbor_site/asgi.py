"""ASGI entry point: HTTP (Django) and websockets (Channels)."""

import asyncio
import gc
import os
from concurrent.futures import ThreadPoolExecutor
from importlib import import_module
from typing import cast

import django
from asgiref.typing import ASGI3Application, ASGIReceiveCallable, ASGISendCallable, Scope, WebSocketScope

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "harbor_site.settings")
django.setup(set_prefix=False)  # what get_asgi_application() does before making its handler

from asgiref.sync import ThreadSensitiveContext  # noqa: E402
from channels.auth import AuthMiddleware  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import WebsocketDenier  # noqa: E402
from channels.sessions import CookieMiddleware  # noqa: E402
from django.conf import settings  # noqa: E402
from django.http.request import split_domain_port, validate_host  # noqa: E402

from compat import daphne, twisted  # noqa: E402
from harbor_site.asgi_handler import OneThreadASGIHandler  # noqa: E402
from harbor_site.request_threads import RequestThreads  # noqa: E402
from harbor_site.sqlite_wal import keep_wal_open  # noqa: E402
from runs.domain import push  # noqa: E402
from runs.protocol.middleware import BodyLimit, body_limit, origin_form, too_large  # noqa: E402
from runs.runtime.dispatch import start_local_runtime  # noqa: E402
from runs.web.routing import websocket_urlpatterns  # noqa: E402

django_asgi = OneThreadASGIHandler()  # the middleware stack in one thread hop per request
# Daphne buffers whole bodies before the app runs (and BodyLimit sees them): refuse large ones
# as they arrive, for a server with no proxy in front to bound them.
daphne.refuse_large_bodies(body_limit, too_large)
# A request must arrive whole in time: a byte or a header line every few seconds no longer
# holds a connection for ever (Twisted's own timeout restarts at every byte).
twisted.bound_request_time(settings.HARBOR_HTTP_REQUEST_SECONDS)

DEFAULT_PORTS = {"http": "80", "https": "443"}


def _origin(scheme: str, netloc: str) -> tuple[str, str, str] | None:
    """(scheme, host, port), with the scheme's default port filled in."""
    host, port = split_domain_port(netloc.lower())
    if scheme not in DEFAULT_PORTS or not host:
        return None
    return scheme, host, port or DEFAULT_PORTS[scheme]


def _headers(scope: WebSocketScope) -> dict[bytes, str]:
    return {name.lower(): value.decode("latin-1") for name, value in scope.get("headers", [])}


def origin_allowed(scope: WebSocketScope) -> bool:
    """Scheme, host and port of `Origin` must name this server as the browser reached it
    (its Host header, which must be an allowed host) or a CSRF trusted origin."""
    headers = _headers(scope)
    scheme, _, netloc = headers.get(b"origin", "").partition("://")
    origin = _origin(scheme, netloc)
    if origin is None:
        return False
    trusted = {_origin(*o.lower().split("://", 1)) for o in settings.CSRF_TRUSTED_ORIGINS if "://" in o}
    if origin in trusted:
        return True
    host = headers.get(b"host", "")
    server_scheme = "https" if scope.get("scheme") == "wss" else "http"
    proxy = getattr(settings, "SECURE_PROXY_SSL_HEADER", None)
    if proxy and headers.get(proxy[0].removeprefix("HTTP_").replace("_", "-").lower().encode()) == proxy[1]:
        server_scheme = "https"  # TLS ends at the proxy
    return validate_host(split_domain_port(host)[0], settings.ALLOWED_HOSTS) and origin == _origin(server_scheme, host)


class OriginValidator:
    def __init__(self, app: ASGI3Application) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: ASGIReceiveCallable, send: ASGISendCallable) -> None:
        if scope["type"] == "websocket" and not origin_allowed(scope):
            return await WebsocketDenier()(scope, receive, send)
        return await self.app(scope, receive, send)


class SocketSession:
    """The login session of a websocket's cookie, read-only: Channels' SessionMiddleware,
    without its wrapper of `send` (it saves a session changed during an HTTP response,
    which a socket never sends, and it ran on every frame of every fan-out). The store loads
    on first use, off the event loop (the consumer's and AuthMiddleware's database calls)."""

    def __init__(self, app: ASGI3Application) -> None:
        self.app = app
        self.store = import_module(settings.SESSION_ENGINE).SessionStore

    async def __call__(self, scope: Scope, receive: ASGIReceiveCallable, send: ASGISendCallable) -> None:
        key = cast(dict, scope).get("cookies", {}).get(settings.SESSION_COOKIE_NAME)
        return await self.app(cast(Scope, {**scope, "session": self.store(key)}), receive, send)


_router = ProtocolTypeRouter(
    {
        "http": BodyLimit(django_asgi),  # /v1/ bodies are bounded before Django spools them
        "websocket": OriginValidator(CookieMiddleware(SocketSession(AuthMiddleware(URLRouter(websocket_urlpatterns))))),
    }
)


# Django runs a request's sync middleware on a thread of the request's own, kept until the
# response ends: for an event stream, as long as it is open. Streams share this one thread
# instead (it serves their short setup; the stream itself is async and reads the database
# on pool threads), so idle streams hold no thread each.
_STREAM_SETUP = ThreadPoolExecutor(max_workers=1, thread_name_prefix="harbor-stream-setup")
STREAM_PATHS = frozenset({"/v1/events", "/v1/events/"})
_request_threads = RequestThreads(settings.HARBOR_REQUEST_THREADS)  # every other request's


async def application(scope: Scope, receive: ASGIReceiveCallable, send: ASGISendCallable) -> None:
    if push.bind_server_loop(asyncio.get_running_loop()):
        # The first connection tells us the server's loop; the embedded runtime starts then.
        keep_wal_open()  # SQLite: requests closing the last connection would rebuild the log each time
        start_local_runtime()
    if scope["type"] == "http":
        scope = cast(Scope, origin_form(dict(scope)))
    if scope["type"] == "http" and scope.get("path") in STREAM_PATHS:
        async with ThreadSensitiveContext(executor=_STREAM_SETUP):
            await _router(scope, receive, send)
        return
    if scope["type"] == "http":
        async with _request_threads.borrowed():
            await _router(scope, receive, send)
        return
    await _router(scope, receive, send)


# What startup built (Django, the apps, the routes) lives as long as the process: frozen out
# of the collector's scans. And the oldest generation is collected a tenth as often: with
# thousands of sockets open, a full collection stalls the event loop every socket shares.
gc.freeze()
gc.set_threshold(*gc.get_threshold()[:2], 100)
