"""Waking the workers: the one small leaf every service calls after a commit.

It imports nothing of the services or the runtime. Each topology registers its waker at
app start (runs.apps): the embedded thread pool, Celery; the one named by
`HARBOR_EXECUTOR` is woken. A wake-up only says "look" (the database is the queue), so a
lost one is made up by the periodic sweep, and a failed one never fails the request whose
change already committed."""

import logging
from collections.abc import Callable

from django.conf import settings
from django.db import transaction

log = logging.getLogger("harbor.runtime")

_wakers: dict[str, Callable[[], None]] = {}


def register(executor: str, waker: Callable[[], None]) -> None:
    _wakers[executor] = waker


def wake_now() -> None:
    waker = _wakers.get(settings.HARBOR_EXECUTOR)
    if waker is None:
        return  # "manual": whoever drives the runtime drains it
    try:
        waker()
    except Exception:
        log.warning("wake-up not delivered; the sweep will pick the work up", exc_info=True)


def wake_on_commit() -> None:
    transaction.on_commit(wake_now)
