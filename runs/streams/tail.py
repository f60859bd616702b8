"""One live stream's view of its groups, shared by the SSE stream and the websockets.

What a stream sends comes only from the durable log (runs.streams.reads). The layer only
nudges ("the log grew"); nudges may be dropped (a full inbox, a Redis restart) and a stream
then catches up on its next read. `Tail` listens for nudges without ever depending on the
layer: while it fails, the stream polls the log."""

import asyncio

from runs.streams.hub import Handler, Layer, hub_for, poll_seconds


class Tail:
    """One stream's view of its groups: their messages, handed over by the process's Hub
    (to `handler` at once when given, else queued for `next`), and None from `next` when
    the stream should read the log (a quiet spell, or the layer failing)."""

    CAPACITY = 100  # a stream this far behind reads the log: queued nudges add nothing

    def __init__(self, layer: Layer, name: str, *, handler: Handler | None = None) -> None:
        self.hub = hub_for(layer)
        self.name, self.handler = name, handler
        self.groups: list[str] = []
        self.queue: asyncio.Queue[dict | None] = asyncio.Queue(self.CAPACITY)

    @property
    def up(self) -> bool:
        return self.hub.up

    async def join(self, *groups: str) -> bool:
        """Listen to these groups too; whether the layer is up (else the stream polls)."""
        self.groups += [g for g in groups if g not in self.groups]
        return await self.hub.add(self, groups)

    async def deliver(self, message: dict) -> None:
        if self.handler is not None:
            await self.handler(message)
        else:
            self._put(message)

    def interrupt(self) -> None:
        """The layer failed or came back: a waiting `next` returns None now (read the log)."""
        self._put(None)

    def _put(self, item: dict | None) -> None:
        try:
            self.queue.put_nowait(item)
        except asyncio.QueueFull:  # the next read of the log catches up on everything
            pass

    async def next(self, timeout: float) -> dict | None:
        """The next message, or None after `timeout` (or sooner while the layer is failing):
        the caller then reads the log, which makes up for any nudge lost meanwhile."""
        if not self.up:
            await asyncio.sleep(min(timeout, poll_seconds()))
            return None
        try:
            async with asyncio.timeout(timeout):  # no task per wait, unlike wait_for
                return await self.queue.get()
        except TimeoutError:
            return None

    async def leave(self) -> None:
        await self.hub.remove(self, self.groups)
