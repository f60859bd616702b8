"""Waking the workers: the one small leaf every service calls after a commit.

It imports nothing of the services or the runtime. Each topology registers its waker at
app start (runs.apps): the embedded thread pool, Celery; the one named by
`HARBOR_EXECUTOR` is woken. A wake-up only says "look" (the database is the queue), so a
lost one is made up by the periodic sweep, and a failed one never fails the request whose
change already committed.

Inside an HTTP request the wake-up waits until the response is sent (`held`, around each
ASGI request in runs.protocol.middleware): the work it starts, on a thread of this process
or a worker on the same cores, would otherwise compete with the answer still being
rendered and sent. It costs the wake-up well under a millisecond."""

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from django.conf import settings
from django.db import transaction

log = logging.getLogger("harbor.runtime")

Waker = Callable[[], None]
_wakers: dict[str, Waker] = {}
_held: ContextVar[list[Waker] | None] = ContextVar("harbor_held_wakes", default=None)


def register(executor: str, waker: Waker) -> None:
    _wakers[executor] = waker


def wake_now() -> None:
    waker = _wakers.get(settings.HARBOR_EXECUTOR)
    if waker is None:
        return  # "manual": whoever drives the runtime drains it
    held = _held.get()
    if held is not None:
        held.append(waker)
    else:
        deliver([waker])


def wake_on_commit() -> None:
    transaction.on_commit(wake_now)


@contextmanager
def held() -> Iterator[list[Waker]]:
    """Collect the wake-ups raised inside the block instead of delivering them; the caller
    delivers them when it is done (`deliver`)."""
    wakers: list[Waker] = []
    token = _held.set(wakers)
    try:
        yield wakers
    finally:
        _held.reset(token)


def deliver(wakers: list[Waker]) -> None:
    for waker in wakers:
        try:
            waker()
        except Exception:
            log.warning("wake-up not delivered; the sweep will pick the work up", exc_info=True)
