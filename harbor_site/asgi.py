"""ASGI entry point: HTTP (Django) and websockets (Channels)."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "harbor_site.settings")
django_asgi = get_asgi_application()

from channels.routing import ProtocolTypeRouter  # noqa: E402

from runs import events  # noqa: E402
from runs.runtime.dispatch import start_local_runtime  # noqa: E402

_router = ProtocolTypeRouter({"http": django_asgi})


async def application(scope, receive, send):
    if events._server_loop is None:
        import asyncio

        events.bind_server_loop(asyncio.get_running_loop())
        start_local_runtime()
    await _router(scope, receive, send)
