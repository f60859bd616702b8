"""Live pushes over Redis pub/sub, where Redis is configured (HARBOR_LIVE_REDIS_URL); the
embedded default keeps the in-memory channel layer.

A commit's push is one synchronous PUBLISH from the committing thread: no event loop, no
hand-off to another thread, a fraction of a millisecond. Each process's Hub
(streams.Hub) listens through a `Subscriber`: one SUBSCRIBE per group it has streams for.
Pub/sub keeps nothing for a listener, so a process that dies takes its subscriptions with
its connection, and after a Redis restart the Hub subscribes again while its streams read
the log. A nudge lost meanwhile costs nothing: streams read the log.

Pub/sub ignores the database number, so channel names carry it: deployments sharing one
Redis on different databases never hear each other."""

import asyncio
import uuid
import weakref
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
def _publisher(url: str) -> tuple[redis.Redis, str]:
    """One client (a connection pool; redis-py starts a new one in a forked worker) and the
    channel prefix per process and URL. No retry: a push that fails is dropped, and the
    caller backs off."""
    retry = Retry(NoBackoff(), 0)
    client = redis.Redis.from_url(
        url, socket_timeout=SEND_TIMEOUT_SECONDS, socket_connect_timeout=SEND_TIMEOUT_SECONDS, retry=retry
    )
    return client, _channel_prefix(url)


def publish(url: str, sends: list[tuple[str, dict]]) -> None:
    """Publish each message to its group, in order. Raises redis.RedisError when Redis is
    down or slower than SEND_TIMEOUT_SECONDS."""
    client, prefix = _publisher(url)
    for group, message in sends:
        client.publish(prefix + group, msgpack.packb(message))


class Subscriber:
    """What streams.Hub asks of a channel layer (new_channel, group_add, group_discard,
    receive), on one pub/sub connection of the event loop that made it."""

    memberships_expire = False  # a subscription lasts as long as its connection

    def __init__(self, url: str) -> None:
        self.url, self.prefix = url, _channel_prefix(url)
        client = aioredis.Redis.from_url(url, socket_connect_timeout=2, retry=AsyncRetry(NoBackoff(), 0))
        self.pubsub = client.pubsub(ignore_subscribe_messages=True)
        self.lock = asyncio.Lock()  # one (un)subscribe at a time on the connection

    async def new_channel(self, prefix: str = "") -> str:
        return prefix + uuid.uuid4().hex  # only a name for the logs: pub/sub needs none

    async def group_add(self, group: str, channel: str) -> None:
        async with self.lock:
            await self.pubsub.subscribe(self.prefix + group)

    async def group_discard(self, group: str, channel: str) -> None:
        async with self.lock:
            await self.pubsub.unsubscribe(self.prefix + group)

    async def receive(self, channel: str) -> dict:
        """The next message of any subscribed group. Raises redis.ConnectionError when the
        connection is lost (the Hub then has its streams poll, and subscribes again)."""
        while True:
            message = await self.pubsub.get_message(ignore_subscribe_messages=True, timeout=None)
            if message is not None and message["type"] == "message":
                return msgpack.unpackb(message["data"])


_subscribers: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Subscriber]" = weakref.WeakKeyDictionary()


def subscriber(url: str) -> Subscriber:
    """The running loop's subscriber (its connection belongs to that loop)."""
    loop = asyncio.get_running_loop()
    found = _subscribers.get(loop)
    if found is None or found.url != url:
        found = _subscribers[loop] = Subscriber(url)
    return found
