"""A commit that wrote outbox messages nudges a deliverer, once it has committed.

Each executor (HARBOR_EXECUTOR) registers what its nudge does at app start (outbox.apps):
the embedded default drains on a thread of this process, production sends a Celery task;
"manual" does nothing (the caller drains). A nudge only says "look": a lost one is made up
by the periodic drain, and a failed one never fails the change that already committed."""

import logging
from collections.abc import Callable

from django.conf import settings
from django.db import transaction

log = logging.getLogger("harbor.outbox")

Nudger = Callable[[], None]
_nudgers: dict[str, Nudger] = {}


def register(executor: str, nudger: Nudger) -> None:
    _nudgers[executor] = nudger


def nudge_now() -> None:
    nudger = _nudgers.get(settings.HARBOR_EXECUTOR)
    if nudger is None:
        return
    try:
        nudger()
    except Exception:
        log.warning("outbox nudge not delivered; the periodic drain picks the message up", exc_info=True)


def nudge_on_commit() -> None:
    """Nudge after the current transaction commits; never if it (or the savepoint this is
    called in) rolls back."""
    transaction.on_commit(nudge_now)
