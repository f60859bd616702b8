"""Django's internals the product relies on, where Django has no public hook.

- `forget_session_key`: a session store that finds no row for the cookie's key must drop
  the key, so that a save makes a new session rather than one under a key the client chose;
  Django's own stores do so through a private attribute, and a store has no public way to.
- `SyncStackASGIHandler`: Django's ASGI handler with its middleware stack built in sync
  mode (`load_middleware(is_async=False)` and `get_response_async`, undocumented), so that
  the stack and a sync view run in one call on the request's thread."""

from asgiref.sync import sync_to_async
from django.contrib.sessions.backends.base import SessionBase
from django.core.handlers.asgi import ASGIHandler
from django.http import HttpRequest, HttpResponseBase

from compat import Checked

CHECKED = Checked("django", lowest=(5, 2), below=(5, 3))  # read against 5.2.20


def forget_session_key(store: SessionBase) -> None:
    """As Django's database store does when the cookie's key finds no live session."""
    store._session_key = None


class SyncStackASGIHandler(ASGIHandler):
    """Django's own handler runs each step of every async-capable middleware, the view and
    the template render as a separate hand-off between the event loop and the request's
    thread: half a dozen per request. Here the whole stack and a sync view run in one call
    on the request's thread (an async view is run from it as Django runs async views in a
    sync stack)."""

    def __init__(self) -> None:
        super().__init__()
        self.load_middleware(is_async=False)

    async def get_response_async(self, request: HttpRequest) -> HttpResponseBase:
        return await sync_to_async(self.get_response, thread_sensitive=True)(request)


__all__ = ["CHECKED", "SyncStackASGIHandler", "forget_session_key"]
