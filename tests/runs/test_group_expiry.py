"""A process that died leaves its memberships in the channel layer's groups, and every push
writes to each member: they expire (CHANNEL_GROUP_EXPIRY_SECONDS), while a live process's
Hub re-joins its groups well inside that time and keeps receiving."""

import asyncio
import shutil

import pytest
from django.conf import settings

from runs.streams.hub import Hub, hub_for
from runs.streams.tail import Tail
from tests.runs.api.test_sse import _in_own_loop
from tests.runs.test_consumer_delivery import Redis


def test_the_hub_re_joins_well_inside_the_group_expiry():
    assert settings.CHANNEL_GROUP_EXPIRY_SECONDS >= 3 * Hub.REJOIN_SECONDS


def test_a_dead_processs_membership_expires_and_a_live_hubs_does_not(monkeypatch):
    if not shutil.which("redis-server"):
        pytest.skip("needs redis-server")
    from channels_redis.core import RedisChannelLayer

    monkeypatch.setattr(Hub, "REJOIN_SECONDS", 0.5)  # scaled down with the expiry below
    redis = Redis()
    redis.start()

    async def scenario() -> tuple[list[int], list[str], str, str]:
        layer = RedisChannelLayer(hosts=[f"redis://127.0.0.1:{redis.port}/0"], group_expiry=2)
        got: list[int] = []

        async def handler(message: dict) -> None:
            got.append(message["sequence"])

        tail = Tail(layer, "live", handler=handler)
        await tail.join("tenant.1")
        dead = await layer.new_channel("dead")
        await layer.group_add("tenant.1", dead)  # a process that died: it never re-joins
        await asyncio.sleep(3.5)  # past the expiry; the live Hub re-joined meanwhile
        await layer.group_send("tenant.1", {"type": "harbor.events", "group": "tenant.1", "sequence": 1})
        for _ in range(50):
            if got:
                break
            await asyncio.sleep(0.05)
        members = await layer.connection(0).zrange(layer._group_key("tenant.1"), 0, -1)
        hub = hub_for(layer)
        await tail.leave()
        assert hub.reader is not None
        hub.reader.cancel()
        return got, [m.decode() for m in members], hub.channel, dead

    try:
        got, members, live, dead = _in_own_loop(scenario())  # an earlier test may hold this thread's loop
    finally:
        redis.stop()
    assert got == [1]
    assert members == [live] and dead not in members
