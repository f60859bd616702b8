"""Django's internals the product relies on, where Django has no public hook.

- `forget_session_key`: a session store that finds no row for the cookie's key must drop
  the key, so that a save makes a new session rather than one under a key the client chose;
  Django's own stores do so through a private attribute, and a store has no public way to.
- `QmarkCachingCursorWrapper`: the SQLite backend's cursor rewrites `%s` to `?` with a
  regular expression on every execution (`convert_query`, undocumented); the rewrite of a
  text is remembered here (harbor_site.sqlite).
- `SyncStackASGIHandler`: Django's ASGI handler with its middleware stack built in sync
  mode (`load_middleware(is_async=False)` and `get_response_async`, undocumented), so that
  the stack and a sync view run in one call on the request's thread."""

from functools import lru_cache

from asgiref.sync import sync_to_async
from django.contrib.sessions.backends.base import SessionBase
from django.core.handlers.asgi import ASGIHandler
from django.db.backends.sqlite3 import base as sqlite_base
from django.http import HttpRequest, HttpResponseBase

from harbor_site.compat import Checked

CHECKED = Checked("django", lowest=(5, 2), below=(5, 3))  # read against 5.2.20

MAX_REMEMBERED_CHARS = 4096


def forget_session_key(store: SessionBase) -> None:
    """As Django's database store does when the cookie's key finds no live session."""
    store._session_key = None


@lru_cache(maxsize=512)
def _qmark(query: str) -> str:
    return sqlite_base.FORMAT_QMARK_REGEX.sub("?", query).replace("%%", "%")


class QmarkCachingCursorWrapper(sqlite_base.SQLiteCursorWrapper):
    """Each statement text rewritten for SQLite once (10 µs a statement, 6-7% of a pause +
    decide cycle, whose statements are the same few texts over and over); long one-off texts
    (a bulk insert) are rewritten as before."""

    def convert_query(self, query: str, *, param_names: list[str] | None = None) -> str:
        if param_names is None and len(query) <= MAX_REMEMBERED_CHARS:
            return _qmark(query)
        return super().convert_query(query, param_names=param_names)  # type: ignore[misc]  # not in the stubs


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


__all__ = ["CHECKED", "QmarkCachingCursorWrapper", "SyncStackASGIHandler", "forget_session_key"]
