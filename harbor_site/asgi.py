"""ASGI entry point: HTTP (Django) and websockets (Channels)."""

import asyncio
import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "harbor_site.settings")
django_asgi = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402

from runs import events  # noqa: E402
from runs.middleware import BodyLimit, limit_daphne_bodies  # noqa: E402
from runs.routing import websocket_urlpatterns  # noqa: E402
from runs.runtime.dispatch import start_local_runtime  # noqa: E402

limit_daphne_bodies()  # Daphne buffers whole bodies before the app runs: refuse large ones as they arrive

_router = ProtocolTypeRouter(
    {
        "http": BodyLimit(django_asgi),  # /v1/ bodies are bounded before Django spools them
        "websocket": AllowedHostsOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns))),
    }
)


async def application(scope, receive, send):
    if events._server_loop is None:
        # The first connection tells us the server's loop; the embedded runtime starts then.
        events.bind_server_loop(asyncio.get_running_loop())
        start_local_runtime()
    await _router(scope, receive, send)
