"""Django's ASGI handler for this site: one thread hop per request, and the run wake-ups a
request raised sent once its answer is out."""

from asgiref.sync import sync_to_async

from compat import django
from runs.protocol.middleware import Receive, Scope, Send
from runs.runtime import wake


class OneThreadASGIHandler(django.SyncStackASGIHandler):
    """Django's ASGI handler, the middleware stack and a sync view in one thread hop per
    request (compat.django.SyncStackASGIHandler)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Wake-ups raised by the request go out once its answer is sent, from a thread
        (a broker that is slow to answer never stalls the event loop)."""
        with wake.held() as wakers:
            try:
                await super().__call__(scope, receive, send)
            finally:
                if wakers:
                    await sync_to_async(wake.deliver, thread_sensitive=False)(wakers)
