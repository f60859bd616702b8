"""Which handler delivers each kind of message. Handlers register at app start (an app's
`ready`), so every process that delivers knows them all."""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Delivery:
    """One attempt at a message, as its handler sees it."""

    id: str
    kind: str
    key: str  # the idempotency key: the same on every attempt, so a retry repeats, never adds
    payload: dict[str, Any]
    attempt: int  # 1 for the first


Handler = Callable[[Delivery], None]


class PermanentFailure(Exception):
    """Raised by a handler when retrying cannot help (the message makes no sense to its
    receiver): the message goes dead at once, with this error's text."""


class UnknownKind(LookupError):
    pass


_handlers: dict[str, Handler] = {}


def register(kind: str, handler: Handler) -> None:
    """`handler` delivers messages of `kind`: returning is delivered, raising is retried
    later (PermanentFailure: dead at once). It is called outside any transaction, maybe
    more than once for one message (a deliverer that died after the effect), so it must
    use the delivery's key to make a repeat harmless. The text of what it raises is kept
    as the message's last error and shown in the admin: never a secret."""
    _handlers[kind] = handler


def handler_for(kind: str) -> Handler:
    try:
        return _handlers[kind]
    except KeyError:
        raise UnknownKind(f"no outbox handler is registered for {kind!r}") from None
