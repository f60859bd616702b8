"""Channels a notice is delivered on (email, signed webhooks, Slack: each its own module), and
the registry of those a deployment turns on. The product registers none yet."""

import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Protocol, runtime_checkable

from notifications.notices import Notice

NAME = re.compile(r"^[a-z][a-z0-9_.-]{0,63}$")  # part of an outbox key: short and plain


class RetryableFailure(Exception):
    """The channel's receiver could not take the notice now (down, throttled): tried again
    later, under the same key. Any other exception a channel raises is retried too."""


class PermanentFailure(Exception):
    """Retrying cannot help (the receiver refuses the notice, the channel is misconfigured):
    given up at once, kept dead for a person to read. The text is shown: never a secret."""


@runtime_checkable
class Channel(Protocol):
    name: str

    def deliver(self, notice: Notice) -> None:
        """Deliver `notice`, outside any transaction, maybe more than once (a deliverer that
        died after the effect): `notice.key` makes a repeat harmless at the receiver."""
        ...


class Channels:
    """Channels by name."""

    def __init__(self) -> None:
        self._channels: dict[str, Channel] = {}

    def register(self, channel: Channel) -> Channel:
        if not NAME.match(channel.name):
            raise ValueError(f"a channel's name is 1 to 64 of a-z 0-9 _ . - (got {channel.name!r})")
        self._channels[channel.name] = channel
        return channel

    def all(self) -> list[Channel]:
        return list(self._channels.values())

    def named(self, name: str) -> Channel | None:
        return self._channels.get(name)


_product = Channels()
_active = _product


def register(channel: Channel) -> Channel:
    """Turn `channel` on (at app start): every later notice is delivered on it too."""
    return _product.register(channel)


def registered() -> list[Channel]:
    """The channels notices go to now."""
    return _active.all()


def active() -> Channels:
    """The registry notices go to: the product's, or a test's own (`isolated`)."""
    return _active


@contextmanager
def isolated() -> Iterator[Channels]:
    """A registry of its own while the block runs (tests): the product's channels see none
    of its notices, and its channels none of the product's."""
    global _active
    previous, _active = _active, Channels()
    try:
        yield _active
    finally:
        _active = previous
