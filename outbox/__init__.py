"""A transactional outbox: side effects that must happen after a commit, and must not be
lost, are written in the transaction that owes them and delivered after it commits.

    outbox.register("a2a.cancel", cancel_handler)          # at app start
    outbox.enqueue("a2a.cancel", key, payload)             # inside the transaction
    outbox.deliver_due()                                    # a deliverer, outside any

Delivered by a Celery task in production and on a thread of the process on the embedded
default; retried with backoff, then dead, and redeliverable from the admin."""

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from outbox.handlers import Delivery, Handler, PermanentFailure, register

if TYPE_CHECKING:
    from outbox.embedded import Runner

__all__ = [
    "Delivery",
    "Handler",
    "PermanentFailure",
    "deliver_due",
    "enqueue",
    "redeliver",
    "register",
    "use_embedded_runner",
]

# The rest import the models, which an app's package must not do as Django loads it: each
# is reached through its module when first called.


def enqueue(kind: str, key: str, payload: dict[str, Any]) -> None:
    """Owe `kind`'s side effect once the current transaction commits (outbox.writer)."""
    from outbox.writer import enqueue as write

    write(kind, key, payload)


def deliver_due(limit: int = 100) -> int:
    """Deliver up to `limit` due messages; how many were delivered (outbox.delivery)."""
    from outbox.delivery import deliver_due as deliver

    return deliver(limit)


def redeliver(ids: Iterable[str]) -> int:
    """Put dead messages back to pending (outbox.writer)."""
    from outbox.writer import redeliver as put_back

    return put_back(ids)


def use_embedded_runner(runner: "Runner | None") -> None:
    """Have the embedded pool run the drains a commit's nudge asks for (outbox.embedded)."""
    from outbox.embedded import use_embedded_runner as use

    use(runner)
