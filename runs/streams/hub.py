"""The process's one listener on the live layer, on behalf of every stream (`Tail`) of it.

A process holds one membership per group in the layer, not one per stream: the layer sends
each push once to each process, which hands it to its streams of that group in memory. A
thousand sockets of one tenant cost the layer one message, not a thousand copies and a
thousand queues. Where Redis is configured, the Hub listens on Redis pub/sub instead of the
channel layer (runs.domain.pubsub), with the same contract."""

import asyncio
import logging
import time
import weakref
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from typing import Protocol, TypeAlias

from channels.layers import BaseChannelLayer
from django.conf import settings

from runs.domain import pubsub

log = logging.getLogger("harbor.streams")


def poll_seconds() -> float:
    """How often a stream reads the log while the channel layer is failing."""
    return float(getattr(settings, "HARBOR_STREAM_POLL_SECONDS", 1.0))


Handler = Callable[[dict], Awaitable[None]]
Layer: TypeAlias = BaseChannelLayer | pubsub.Subscriber


def listening_on(layer: BaseChannelLayer) -> Layer:
    """What this process's streams listen on: Redis pub/sub where configured, else the
    channel layer (the embedded default's in-memory one)."""
    url = pubsub.redis_url()
    return pubsub.subscriber(url) if url else layer


class Listener(Protocol):
    """What a Hub hands its groups' messages to: each stream's Tail (runs.streams.tail)."""

    name: str

    async def deliver(self, message: dict) -> None: ...

    def interrupt(self) -> None: ...


class Hub:
    """This process's one channel in the layer and its group memberships, on behalf of
    every stream (`Tail`) of the process: a message names its group (push.push), and
    goes to that group's streams here, in the order the layer delivered it."""

    JOIN_TIMEOUT = 2.0
    # Memberships expire in the layer and a restarted Redis forgets them: re-join this often.
    REJOIN_SECONDS = 30.0
    YIELD_EVERY = 100
    INBOX_LIMIT = 10_000
    JOINS_AT_ONCE = 50

    def __init__(self, layer: Layer) -> None:
        self.layer = layer
        # A channel layer forgets memberships after a while (and a restarted Redis all of
        # them): they are renewed every REJOIN_SECONDS. Pub/sub needs that only after an outage.
        self.renews = getattr(layer, "memberships_expire", True)
        self.channel = ""
        self.tails: dict[str, set[Listener]] = {}
        self.up = True
        self.reader: asyncio.Task | None = None
        self.inbox: deque[dict] = deque()  # received, not yet handed over (_deliver_all)
        self.delivering: asyncio.Task | None = None
        self.rejoining: asyncio.Task | None = None
        self.joined_at = time.monotonic()

    @property
    def handing_over(self) -> bool:
        """Whether pushes received here are still on their way to the streams."""
        return bool(self.inbox) or (self.delivering is not None and not self.delivering.done())

    async def add(self, tail: Listener, groups: Iterable[str]) -> bool:
        """Hand this group's messages to `tail` too; whether the layer has the membership."""
        groups = list(groups)
        if not self.channel:
            self.channel = await self.layer.new_channel("harbor")
        for group in groups:
            self.tails.setdefault(group, set()).add(tail)
        joined = await self._join(groups)
        if self.reader is None or self.reader.done():
            self.reader = asyncio.create_task(self._read())
        return joined

    async def remove(self, tail: Listener, groups: Iterable[str]) -> None:
        for group in groups:
            tails = self.tails.get(group)
            if tails is None:
                continue
            tails.discard(tail)
            if tails:
                continue
            del self.tails[group]
            try:
                async with asyncio.timeout(self.JOIN_TIMEOUT):
                    await self.layer.group_discard(group, self.channel)
            except Exception:  # memberships expire; a message for nobody is dropped here
                log.debug("group_discard failed for %s", group, exc_info=True)
            if group in self.tails:  # a stream joined while the membership was being dropped
                await self._join([group])

    async def _join(self, groups: list[str], at_once: int = 1) -> bool:
        """Join in order (a stream's connect), or `at_once` groups together (a renewal)."""
        try:
            for start in range(0, len(groups), at_once):
                joins = [self.layer.group_add(group, self.channel) for group in groups[start : start + at_once]]
                async with asyncio.timeout(self.JOIN_TIMEOUT):
                    await asyncio.gather(*joins)
        except Exception:
            if self.up:
                log.warning("channel layer unavailable; live streams poll the log", exc_info=True)
                self._down()
            return False
        if not self.up:
            log.info("channel layer is back")
            self.up = True
            # Each stream reads the log once more: what was committed between its last poll
            # and the membership came with no push.
            self._interrupt_all()
        return True

    def _down(self) -> None:
        """Every stream reads the log now, and polls it until the layer is back."""
        self.up = False
        self._interrupt_all()

    def _interrupt_all(self) -> None:
        for tail in {tail for tails in self.tails.values() for tail in tails}:
            tail.interrupt()

    async def _read(self) -> None:
        while self.tails:
            if not self.up:
                await asyncio.sleep(poll_seconds())
                await self._rejoin()
                continue
            try:
                # asyncio.timeout, not wait_for: on Python 3.11 wait_for returns a message that
                # arrived as the reader was cancelled, and the cancel is lost (a server's
                # shutdown, or a test's loop, then waits on the reader forever).
                async with asyncio.timeout(self.REJOIN_SECONDS):
                    message = await self.layer.receive(self.channel)
            except TimeoutError:
                if self.renews:
                    await self._rejoin()
                continue
            except Exception:
                log.warning("channel layer receive failed; live streams poll the log", exc_info=True)
                self._down()
                continue
            if len(self.inbox) >= self.INBOX_LIMIT:  # far behind: readers catch up from the log
                self.inbox.popleft()
            self.inbox.append(message)
            if self.delivering is None or self.delivering.done():
                self.delivering = asyncio.create_task(self._deliver_all())
            if self.renews and time.monotonic() - self.joined_at > self.REJOIN_SECONDS and not self.rejoining:
                # Aside, so that pushes keep flowing while thousands of memberships renew.
                self.rejoining = asyncio.create_task(self._rejoin())

    async def _rejoin(self) -> None:
        self.joined_at = time.monotonic()
        try:
            await self._join(list(self.tails), at_once=self.JOINS_AT_ONCE)
        finally:
            self.rejoining = None

    async def _deliver_all(self) -> None:
        """Hand over what arrived, in order. Pushes to one group that arrived while an
        earlier fan-out was under way go out as one, when each follows the last: a run's
        burst of commits then costs each socket one hand-over, not one per commit."""
        while self.inbox:
            message = self.inbox.popleft()
            while self.inbox and _follows(message, self.inbox[0]):
                message = _merged(message, self.inbox.popleft())
            await self._deliver(message)

    async def _deliver(self, message: dict) -> None:
        # Only the group a message names: one channel serves every tenant of the process.
        for count, tail in enumerate(list(self.tails.get(message.get("group", ""), ())), 1):
            try:
                await tail.deliver(message)
            except Exception:  # one stream's failure is not the others'
                log.exception("delivering a live message to %s failed", tail.name)
            if count % self.YIELD_EVERY == 0:
                # Let the server write what was sent so far (it writes on the loop's next turn)
                # while the rest is handed over: the first sockets need not wait for the last.
                await asyncio.sleep(0)


def _follows(message: dict, later: dict) -> bool:
    return (
        message.get("type") == later.get("type") == "harbor.events"
        and message.get("group") == later.get("group")
        and later.get("first") == message.get("sequence", 0) + 1
    )


def _merged(message: dict, later: dict) -> dict:
    return {
        **message,
        "pushes": message.get("pushes", 1) + later.get("pushes", 1),  # how many it stands for
        "sequence": later["sequence"],
        "runs": sorted({*message.get("runs", ()), *later.get("runs", ())}),
        "events": [*message["events"], *later["events"]],
    }


_hubs: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Hub]" = weakref.WeakKeyDictionary()


def hub_for(layer: Layer) -> Hub:
    """The hub of the running loop for this layer (a new one when the layer was replaced)."""
    loop = asyncio.get_running_loop()
    hub = _hubs.get(loop)
    if hub is None or hub.layer is not layer:
        hub = _hubs[loop] = Hub(layer)
    return hub
