"""Waking the workers: the one small leaf every service calls after a commit.

It imports nothing of the services or the runtime. Each topology registers its waker at
app start (runs.apps): the embedded thread pool, Celery; the one named by
`HARBOR_EXECUTOR` is woken. A wake-up only says "look" (the database is the queue), so a
lost one is made up by the periodic sweep, and a failed one never fails the request whose
change already committed.

A waker that runs the work in this very process (the embedded pool) is held until the
response that caused it is sent (`after_response`, around each ASGI request): woken at
commit, its thread would take the GIL from the request still rendering and sending its
answer. Celery's is sent at commit: its work runs in another process."""

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from django.conf import settings
from django.db import transaction

log = logging.getLogger("harbor.runtime")

_wakers: dict[str, Callable[[], None]] = {}
_in_process: set[str] = set()
_held: ContextVar[list[Callable[[], None]] | None] = ContextVar("harbor_held_wakes", default=None)


def register(executor: str, waker: Callable[[], None], *, in_process: bool = False) -> None:
    _wakers[executor] = waker
    (_in_process.add if in_process else _in_process.discard)(executor)


def wake_now() -> None:
    executor = settings.HARBOR_EXECUTOR
    waker = _wakers.get(executor)
    if waker is None:
        return  # "manual": whoever drives the runtime drains it
    held = _held.get()
    if held is not None and executor in _in_process:
        held.append(waker)
        return
    _deliver(waker)


def wake_on_commit() -> None:
    transaction.on_commit(wake_now)


@contextmanager
def after_response() -> Iterator[None]:
    """Hold in-process wake-ups raised inside the block until it ends."""
    held: list[Callable[[], None]] = []
    token = _held.set(held)
    try:
        yield
    finally:
        _held.reset(token)
        for waker in held:
            _deliver(waker)


def _deliver(waker: Callable[[], None]) -> None:
    try:
        waker()
    except Exception:
        log.warning("wake-up not delivered; the sweep will pick the work up", exc_info=True)
