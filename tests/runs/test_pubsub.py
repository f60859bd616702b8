"""Live pushes over Redis pub/sub (runs.domain.pubsub), on a redis-server of the test's own:
a commit publishes its events once, after it commits; a push reaches the streams of its
group and of its Redis database only."""

import asyncio
import shutil
import subprocess
import time
from collections.abc import Iterator

import msgpack
import pytest
import redis

from runs.application import run_start
from runs.domain import events, pubsub
from runs.domain import push as live_push
from runs.domain.event_types import MessageReceived
from runs.streams.tail import Tail
from tests.runs.api.test_sse import _in_own_loop
from tests.runs.test_consumer_delivery import Redis


@pytest.fixture
def own_redis(settings) -> Iterator[str]:
    if not shutil.which("redis-server"):
        pytest.skip("needs redis-server")
    server = Redis()
    server.start()
    url = f"redis://127.0.0.1:{server.port}/0"
    settings.HARBOR_LIVE_REDIS_URL = url
    live_push._push_paused_until = 0.0
    yield url
    server.stop()
    live_push._push_paused_until = 0.0


@pytest.mark.django_db(transaction=True)
def test_a_commit_publishes_its_events_once_after_it_commits(people_tx, own_redis):
    run, _ = run_start(caller=people_tx.caller("alice"), query="count to 3", agent_id="countdown")  # not drained
    listener = redis.Redis.from_url(own_redis).pubsub(ignore_subscribe_messages=True)
    listener.subscribe(f"harbor.live.0.{live_push.tenant_group(run.tenant_id)}")
    listener.get_message(timeout=1)  # the subscription's confirmation
    with events.atomic():  # the events of one transaction go in one push
        for _ in range(3):
            events.emit(run=run, type=events.MESSAGE_RECEIVED, payload=MessageReceived(TaskID=run.pk, Message="hi"))
        assert listener.get_message(timeout=0.3) is None  # nothing before the commit
    message = listener.get_message(timeout=2)
    assert message is not None
    pushed = msgpack.unpackb(message["data"])
    assert pushed["type"] == "harbor.events" and pushed["sequence"] == pushed["first"] + 2
    assert [item["envelope"]["sequence"] for item in pushed["events"]] == list(
        range(pushed["first"], pushed["sequence"] + 1)
    )
    assert listener.get_message(timeout=0.3) is None  # once
    listener.close()


def test_a_push_reaches_the_streams_of_its_group_on_its_database_only(own_redis):
    other_database = own_redis.removesuffix("/0") + "/1"

    async def scenario() -> dict[str, list[int]]:
        got: dict[str, list[int]] = {"tenant.1": [], "tenant.2": [], "tenant.1 on db 1": []}

        def tail(subscriber: pubsub.Subscriber, name: str) -> Tail:
            async def handler(message: dict) -> None:
                got[name].append(message["sequence"])

            return Tail(subscriber, name, handler=handler)

        here, there = pubsub.Subscriber(own_redis), pubsub.Subscriber(other_database)
        tails = [(tail(here, "tenant.1"), "tenant.1"), (tail(here, "tenant.2"), "tenant.2")]
        tails.append((tail(there, "tenant.1 on db 1"), "tenant.1"))
        for listening, group in tails:
            assert await listening.join(group)
        for sequence, group in [(1, "tenant.1"), (2, "tenant.2"), (3, "tenant.1")]:
            message = {"type": "harbor.events", "group": group, "first": sequence, "sequence": sequence}
            await asyncio.to_thread(pubsub.publish, own_redis, [(group, message)])
        await asyncio.sleep(0.5)
        for listening, _ in tails:
            await listening.leave()
        return got

    got = _in_own_loop(scenario())
    assert got == {"tenant.1": [1, 3], "tenant.2": [2], "tenant.1 on db 1": []}


def test_a_join_returns_once_redis_has_the_subscription(own_redis):
    """A SUBSCRIBE written but not yet taken by Redis may come after another process's
    PUBLISH; a join waits for Redis's answer (read by the join itself when no one else reads
    the connection, else handed over by the Hub's reader), so a push sent after it arrives."""
    admin = redis.Redis.from_url(own_redis)
    held = 0.4

    async def scenario() -> tuple[list[float], list[int]]:
        got: list[int] = []

        async def handler(message: dict) -> None:
            got.append(message["sequence"])

        tail = Tail(pubsub.Subscriber(own_redis), "t", handler=handler)
        waited = []
        for sequence, group in enumerate(["tenant.1", "tenant.2"], start=1):  # no reader yet; then the Hub's
            await asyncio.to_thread(admin.execute_command, "CLIENT", "PAUSE", int(held * 1000), "ALL")
            began = time.monotonic()
            assert await tail.join(group)
            waited.append(time.monotonic() - began)
            message = {"type": "harbor.events", "group": group, "first": sequence, "sequence": sequence}
            await asyncio.to_thread(pubsub.publish, own_redis, [(group, message)])
        await asyncio.sleep(0.3)
        await tail.leave()
        return waited, got

    waited, got = _in_own_loop(scenario())
    assert all(seconds > held / 2 for seconds in waited), waited  # until Redis took the SUBSCRIBE
    assert got == [1, 2]
    admin.close()


def test_the_first_push_after_a_redis_restart_arrives(own_redis):
    """A restart leaves the publishing connection closed: the client's pool notices before
    its next use, and that push goes on a new connection."""
    pubsub.publish(own_redis, [("tenant.1", {"n": 1})])  # the connection is open
    port = int(own_redis.rsplit(":", 1)[1].split("/")[0])
    server = Redis()
    server.port = port
    subprocess.run(["redis-cli", "-p", str(port), "shutdown", "nosave"], capture_output=True)
    server.start()
    listener = redis.Redis.from_url(own_redis).pubsub(ignore_subscribe_messages=True)
    listener.subscribe("harbor.live.0.tenant.1")
    listener.get_message(timeout=1)
    pubsub.publish(own_redis, [("tenant.1", {"n": 2})])
    message = listener.get_message(timeout=2)
    assert message is not None and msgpack.unpackb(message["data"]) == {"n": 2}
    listener.close()
    server.stop()
