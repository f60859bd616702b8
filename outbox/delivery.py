"""Delivering due messages: claim a few in a short transaction (a lease, so a deliverer
that dies gives them back), run each handler outside any transaction, then record the
outcome: delivered, due again after a backoff, or dead.

Deliverers may run side by side (Celery workers, the embedded pool's threads): a claim
skips rows another holds (PostgreSQL's SKIP LOCKED; SQLite's write transactions run one at
a time), and an outcome is recorded only by the deliverer whose claim still stands."""

import logging
import time

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from outbox.handlers import Delivery, PermanentFailure, handler_for
from outbox.models import ERROR_LIMIT, OutboxMessage, State
from outbox.policy import backoff, lease, max_attempts

log = logging.getLogger("harbor.outbox")

CLAIM_BATCH = 10  # claimed per transaction; what a slow batch has not begun is given back (below)


def deliver_due(limit: int = 100) -> int:
    """Deliver up to `limit` messages that are due, oldest due first; how many were
    delivered. A failed attempt is retried by a later call (a nudge, the periodic drain),
    never by waiting here."""
    if transaction.get_connection().in_atomic_block:
        raise transaction.TransactionManagementError("outbox messages are delivered outside any transaction")
    delivered = 0
    tried: set[str] = set()  # one attempt per message per drain, even when its retry is due at once
    while len(tried) < limit:
        claimed = _claim(min(CLAIM_BATCH, limit - len(tried)), tried)
        if claimed is None:
            break
        # Past half its lease, a claim is given back rather than begun: another deliverer
        # could take it while this one is still at it.
        fresh_until = time.monotonic() + lease().total_seconds() / 2
        for index, message in enumerate(claimed):
            if time.monotonic() > fresh_until:
                _give_back(claimed[index:])
                break
            tried.add(message.pk)
            delivered += _attempt(message)
    return delivered


def _claim(count: int, tried: set[str]) -> list[OutboxMessage] | None:
    """Up to `count` due messages not `tried` yet, taken out of other deliverers' reach
    until the lease ends, each with this attempt counted; None when none was due."""
    now, most = timezone.now(), max_attempts()
    with transaction.atomic(durable=True):
        due = list(
            OutboxMessage.objects.select_for_update(skip_locked=True, no_key=True)
            .filter(state=State.PENDING, next_attempt_at__lte=now)
            .exclude(pk__in=tried)
            .order_by("next_attempt_at", "id")[:count]
        )
        if not due:
            return None
        # Every attempt of these was claimed and none came back: their deliverer died each time.
        OutboxMessage.objects.filter(pk__in=[m.pk for m in due if m.attempts >= most]).update(
            state=State.DEAD, last_error=f"no outcome recorded after {most} attempts"
        )
        taken = [m for m in due if m.attempts < most]
        OutboxMessage.objects.filter(pk__in=[m.pk for m in taken]).update(
            attempts=F("attempts") + 1, next_attempt_at=now + lease()
        )
    for message in taken:
        message.attempts += 1
    return taken


def _give_back(messages: list[OutboxMessage]) -> None:
    """Claimed messages not begun: due again now, with the attempt that never began uncounted."""
    for message in messages:
        OutboxMessage.objects.filter(pk=message.pk, state=State.PENDING, attempts=message.attempts).update(
            attempts=F("attempts") - 1, next_attempt_at=timezone.now()
        )


def _attempt(message: OutboxMessage) -> int:
    """One attempt at `message`, with its outcome recorded; 1 if it was delivered."""
    delivery = Delivery(
        id=message.pk, kind=message.kind, key=message.key, payload=message.payload, attempt=message.attempts
    )
    try:
        handler_for(message.kind)(delivery)
    except PermanentFailure as error:
        _failed(message, error, permanent=True)
        return 0
    except Exception as error:  # any failure of the receiver's: retried, up to the limit
        _failed(message, error, permanent=False)
        return 0
    OutboxMessage.objects.filter(pk=message.pk, state=State.PENDING).update(
        state=State.DELIVERED, delivered_at=timezone.now()
    )
    return 1


def _failed(message: OutboxMessage, error: Exception, *, permanent: bool) -> None:
    text = f"{type(error).__name__}: {error}"[:ERROR_LIMIT]
    if permanent or message.attempts >= max_attempts():
        changes: dict[str, object] = {"state": State.DEAD, "last_error": text}
        log.error("outbox %s %s dead after attempt %s: %s", message.kind, message.pk, message.attempts, text)
    else:
        changes = {"next_attempt_at": timezone.now() + backoff(message.attempts), "last_error": text}
        log.warning("outbox %s %s attempt %s failed: %s", message.kind, message.pk, message.attempts, text)
    # Only while this claim stands: past its lease another deliverer may have taken the message.
    OutboxMessage.objects.filter(pk=message.pk, state=State.PENDING, attempts=message.attempts).update(**changes)
