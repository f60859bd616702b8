"""Live pushes over Redis pub/sub, where Redis is configured (HARBOR_LIVE_REDIS_URL); the
embedded default keeps the in-memory channel layer.

A commit's push is one pipelined round of PUBLISH commands written by the committing thread
through redis-py's client (no event loop, no hand-off to another thread), waiting at most
SEND_TIMEOUT_SECONDS for Redis's answer. The client's pool re-connects after a fork and
notices a connection Redis closed (a restart) before it is used again. Each process's Hub
(streams.Hub) listens through a `Subscriber`: one SUBSCRIBE per group it has streams for.
Pub/sub keeps nothing for a listener, so a process that dies takes its subscriptions with
its connection, and after a Redis restart the Hub subscribes again while its streams read
the log. A nudge lost meanwhile costs nothing: streams read the log.

Why not channels-redis's RedisPubSubChannelLayer (checked against channels-redis 4.3): its
group_add returns before Redis has confirmed the subscription, its receiver swallows a lost
connection (the streams would not know to poll the log meanwhile), and a receive that times
out unsubscribes the channel. The Hub relies on all three.

Pub/sub ignores the database number, so channel names carry it: deployments sharing one
Redis on different databases never hear each other."""

import asyncio
import uuid
import weakref
from collections import deque
from functools import cache
from urllib.parse import urlsplit

import msgpack
import redis
import redis.asyncio as aioredis
from django.conf import settings
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import NoBackoff
from redis.retry import Retry

SEND_TIMEOUT_SECONDS = 0.5


def redis_url() -> str | None:
    """Where live pushes go, or None: the channel layer carries them."""
    return settings.HARBOR_LIVE_REDIS_URL or None


def _channel_prefix(url: str) -> str:
    database = urlsplit(url).path.strip("/") or "0"
    return f"harbor.live.{database}."


@cache
def _client(url: str) -> redis.Redis:
    """One client per process and URL, thread-safe (its pool hands each thread a connection),
    failing fast: a push never stalls a commit for longer than SEND_TIMEOUT_SECONDS."""
    return redis.Redis.from_url(
        url,
        socket_timeout=SEND_TIMEOUT_SECONDS,
        socket_connect_timeout=SEND_TIMEOUT_SECONDS,
        retry=Retry(NoBackoff(), 0),
    )


def publish(url: str, sends: list[tuple[str, dict]]) -> None:
    """Publish each message to its group, in order, in one round trip. Raises
    redis.RedisError when Redis cannot be reached or takes more than SEND_TIMEOUT_SECONDS."""
    prefix, client = _channel_prefix(url), _client(url)
    if len(sends) == 1:  # the common case: a pipeline's bookkeeping would double its cost
        group, message = sends[0]
        client.publish(prefix + group, msgpack.packb(message))
        return
    pipeline = client.pipeline(transaction=False)
    for group, message in sends:
        pipeline.publish(prefix + group, msgpack.packb(message))
    pipeline.execute()


class Subscriber:
    """What streams.Hub asks of a channel layer (new_channel, group_add, group_discard,
    receive), on one pub/sub connection of the event loop that made it.

    A join returns once Redis has confirmed the subscription: a SUBSCRIBE only written to
    the socket may still be waiting in Redis behind a PUBLISH from another process, whose
    push (a revoked membership's close, say) would then pass the new stream by. The
    confirmation arrives on the connection the Hub's reader reads; a join made while no one
    is reading (the process's first, or the Hub's re-join after an outage) reads it itself,
    keeping the messages it meets for `receive`."""

    memberships_expire = False  # a subscription lasts as long as its connection

    def __init__(self, url: str) -> None:
        self.url, self.prefix = url, _channel_prefix(url)
        client = aioredis.Redis.from_url(url, socket_connect_timeout=2, retry=AsyncRetry(NoBackoff(), 0))
        self.pubsub = client.pubsub()
        self.lock = asyncio.Lock()  # one (un)subscribe at a time on the connection
        self.reading = asyncio.Lock()  # one reader of the connection at a time
        self.received: deque[dict] = deque()  # read by a join, not yet handed to `receive`
        self.confirming: dict[bytes, list[asyncio.Future[None]]] = {}

    async def new_channel(self, prefix: str = "") -> str:
        return prefix + uuid.uuid4().hex  # only a name for the logs: pub/sub needs none

    async def group_add(self, group: str, channel: str) -> None:
        name = (self.prefix + group).encode()
        confirmed = asyncio.get_running_loop().create_future()
        self.confirming.setdefault(name, []).append(confirmed)
        async with self.lock:
            await self.pubsub.subscribe(name)
        while not confirmed.done():
            if self.reading.locked():  # the reader hands the confirmation over
                await asyncio.wait([confirmed], timeout=CONFIRM_POLL_SECONDS)
            else:
                async with self.reading:
                    await self._read_one()

    async def group_discard(self, group: str, channel: str) -> None:
        async with self.lock:
            await self.pubsub.unsubscribe(self.prefix + group)

    async def receive(self, channel: str) -> dict:
        """The next message of any subscribed group. Raises redis.ConnectionError when the
        connection is lost (the Hub then has its streams poll, and subscribes again)."""
        while not self.received:
            async with self.reading:
                if not self.received:
                    await self._read_one()
        return self.received.popleft()

    async def _read_one(self) -> None:
        """Read what Redis sends next: a message is kept, a confirmation hands over."""
        message = await self.pubsub.get_message(timeout=None)
        if message is None:
            return
        if message["type"] == "message":
            self.received.append(msgpack.unpackb(message["data"]))
        elif message["type"] == "subscribe":
            for waiter in self.confirming.pop(message["channel"], []):
                if not waiter.done():
                    waiter.set_result(None)


# How often a join waiting on the reader looks whether it still reads (a reader cancelled
# meanwhile leaves the confirmation for the join to read).
CONFIRM_POLL_SECONDS = 0.05


_subscribers: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Subscriber]" = weakref.WeakKeyDictionary()


def subscriber(url: str) -> Subscriber:
    """The running loop's subscriber (its connection belongs to that loop)."""
    loop = asyncio.get_running_loop()
    found = _subscribers.get(loop)
    if found is None or found.url != url:
        found = _subscribers[loop] = Subscriber(url)
    return found
