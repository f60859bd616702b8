"""One event loop in a background thread for the SDK's async client, so a synchronous tool
body can wait on a remote agent while it keeps checking for a hard cancel (the check reads
the database, which is not allowed inside an event loop)."""

import asyncio
import threading
from collections.abc import Callable, Coroutine
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, TypeVar

T = TypeVar("T")

_loop: asyncio.AbstractEventLoop | None = None
_lock = threading.Lock()


class Interrupted(Exception):
    """The caller asked to stop waiting (a hard cancel of the step in flight)."""


def _running_loop() -> asyncio.AbstractEventLoop:
    global _loop
    with _lock:
        if _loop is None or _loop.is_closed():
            _loop = asyncio.new_event_loop()
            threading.Thread(target=_loop.run_forever, name="harbor-a2a-loop", daemon=True).start()
        return _loop


def call(
    coroutine: Coroutine[Any, Any, T], *, interrupted: Callable[[], bool] = lambda: False, poll_seconds: float = 0.1
) -> T:
    """Run `coroutine` on the shared loop and wait for it; `interrupted()` is asked between
    waits, and a True answer cancels the coroutine and raises Interrupted."""
    future = asyncio.run_coroutine_threadsafe(coroutine, _running_loop())
    try:
        while True:
            try:
                return future.result(timeout=poll_seconds)
            except FutureTimeout:
                if interrupted():
                    raise Interrupted() from None
    finally:
        future.cancel()  # a no-op once done; otherwise (interrupted, a lost lease) stop the call
