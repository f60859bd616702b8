"""Writing to the outbox: a message in the transaction of the change that owes it, and a
dead one put back to pending."""

from collections.abc import Iterable
from typing import Any

from django.db import transaction
from django.utils import timezone

from outbox.handlers import handler_for
from outbox.models import KEY_LIMIT, OutboxMessage, State
from outbox.nudges import nudge_on_commit


def enqueue(kind: str, key: str, payload: dict[str, Any]) -> None:
    """Owe `kind`'s side effect once the current transaction commits: written in that
    transaction (it lands or goes with it, savepoints included) and delivered after it.
    A second message of the same kind and key is not written: the first stands."""
    assert transaction.get_connection().in_atomic_block, "an outbox message is written in the transaction that owes it"
    handler_for(kind)  # a kind nobody delivers fails the change now, not in a dead letter later
    if not key or len(key) > KEY_LIMIT:
        raise ValueError(f"an outbox key is 1 to {KEY_LIMIT} characters")
    # One statement whatever is there already (ON CONFLICT DO NOTHING / INSERT OR IGNORE):
    # a conflict would otherwise abort the caller's transaction on PostgreSQL.
    OutboxMessage.objects.bulk_create([OutboxMessage(kind=kind, key=key, payload=payload)], ignore_conflicts=True)
    nudge_on_commit()


def redeliver(ids: Iterable[str]) -> int:
    """Put dead messages back to pending, due now, with their attempts counted afresh; the
    number put back. Messages that are not dead are left as they are."""
    with transaction.atomic():
        count = OutboxMessage.objects.filter(pk__in=list(ids), state=State.DEAD).update(
            state=State.PENDING, attempts=0, next_attempt_at=timezone.now()
        )
        if count:
            nudge_on_commit()
    return count
