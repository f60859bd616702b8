"""The websocket stream delivers every event it may show, once and in order: through the
connect window, a long backlog, a burst faster than the socket reads, and a channel-layer
(Redis) restart. And it closes when the person logs out or loses the membership."""

import asyncio
import shutil
import subprocess
import time

import pytest
from channels.db import database_sync_to_async
from channels.layers import channel_layers, get_channel_layer
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.db import transaction
from django.test import Client

from harbor_site.asgi import application
from runs.domain import events, pubsub
from runs.domain import push as live_push
from runs.domain.event_types import MessageReceived
from runs.models import Event
from runs.streams.hub import hub_for, listening_on
from runs.streams.tail import Tail
from runs.web import consumers
from runs.web.consumers import EventsConsumer
from runs.web.sockets import reads as socket_reads
from tests.live import free_port

from .test_consumers import HOST, ORIGIN, connect, revoke, start

pytestmark = [pytest.mark.asyncio, pytest.mark.django_db(transaction=True)]


@database_sync_to_async
def emit(run, count: int = 1, per_transaction: int = 1) -> None:
    for _ in range(count // per_transaction):
        with transaction.atomic():
            for _ in range(per_transaction):
                events.emit(run=run, type=events.MESSAGE_RECEIVED, payload=MessageReceived(TaskID=run.pk, Message="hi"))


@database_sync_to_async
def logged(run=None) -> list[int]:
    rows = Event.objects.filter(run=run) if run else Event.objects.all()
    return list(rows.order_by("sequence").values_list("sequence", flat=True))


async def nudge(group: str, message: dict) -> None:
    """A push to the group, on whatever this process's streams listen on."""
    url = pubsub.redis_url()
    if url:
        await asyncio.to_thread(pubsub.publish, url, [(group, message)])
    else:
        await get_channel_layer().group_send(group, message)


async def receive_until(communicator, last: int, timeout: float = 15) -> list[int]:
    """Sequences received until `last` arrives (or nothing came for `timeout` seconds: longer
    than a socket's re-check, which reads the log even if every push was lost)."""
    seen: list[int] = []
    while not seen or seen[-1] < last:
        try:
            seen.append((await communicator.receive_json_from(timeout=timeout))["sequence"])
        except TimeoutError:
            break
    return seen


async def test_replay_pages_through_the_whole_backlog(people_tx):
    run = await start(people_tx, "alice")
    await emit(run, 1250, per_transaction=250)
    backlog = await logged(run)
    assert len(backlog) > 1250
    olivia, connected, _ = await connect(f"/ws/events/?run={run.pk}&after=0", user="olivia")
    assert connected
    assert await receive_until(olivia, backlog[-1]) == backlog
    assert await olivia.receive_nothing(timeout=0.3)
    await olivia.disconnect()


async def test_an_event_committed_while_the_socket_connects_is_not_lost(people_tx, monkeypatch):
    """An event committed after the replay cursor was read but before the socket joined its
    group (here: just as it joins) still arrives, once."""
    run = await start(people_tx, "alice")
    before = await logged(run)
    layer = listening_on(get_channel_layer())
    original = layer.group_add
    injected: list[None] = []  # the one event emitted mid-join

    async def group_add(group, channel):
        if not injected:
            injected.append(await emit(run))
        await original(group, channel)

    monkeypatch.setattr(layer, "group_add", group_add)
    olivia, connected, _ = await connect(f"/ws/events/?run={run.pk}&after={before[-1]}", user="olivia")
    assert connected and injected
    after = await logged(run)
    assert len(after) == len(before) + 1
    assert await receive_until(olivia, after[-1], timeout=3) == after[len(before) :]
    assert await olivia.receive_nothing(timeout=0.3)
    await olivia.disconnect()


async def test_a_burst_faster_than_the_socket_reads_loses_nothing(people_tx):
    """600 commits while the socket cannot read (the emitter holds the database thread):
    far more nudges than a channel's capacity, and still every event, in order."""
    run = await start(people_tx, "alice")
    bob, connected, code = await connect(user="bob")
    assert connected, code
    olivia, connected, code = await connect(f"/ws/events/?run={run.pk}", user="olivia")
    assert connected, code
    before = await logged()
    await emit(run, 600)
    burst = (await logged())[len(before) :]
    assert len(burst) == 600
    assert await receive_until(bob, burst[-1]) == burst
    assert await receive_until(olivia, burst[-1]) == burst
    for communicator in (bob, olivia):
        assert await communicator.receive_nothing(timeout=0.3)
        await communicator.disconnect()


async def test_the_last_push_of_a_long_burst_lost_is_read_from_the_log_once_the_burst_goes_quiet(
    people_tx, settings, monkeypatch
):
    """After half a channel's capacity of pushes in a row, a socket compares the tenant's
    head with its cursor once the burst goes quiet: a lost last push (nothing later would
    reveal the gap) costs a fraction of a second, not a wait for the next re-check."""
    settings.HARBOR_WS_RECHECK_SECONDS = 120
    run = await start(people_tx, "alice")
    bob, connected, _ = await connect(user="bob")
    assert connected
    assert await bob.receive_nothing(timeout=0.3)
    push, pushes = live_push.push, []

    def losing_the_last(tenant_id, published):
        pushes.append(published)
        if len(pushes) < 60:
            push(tenant_id, published)

    monkeypatch.setattr(live_push, "push", losing_the_last)
    before = await logged()
    await emit(run, 60)
    burst = (await logged())[len(before) :]
    assert await receive_until(bob, burst[-1], timeout=3) == burst
    await bob.disconnect()


async def test_a_socket_behind_the_head_waits_for_the_pushes_its_process_is_still_handing_over(
    people_tx, settings, monkeypatch
):
    """A fan-out to thousands of sockets takes a while: a socket that saw the head past its
    cursor meanwhile takes the pushes still queued here, rather than every socket re-checking
    its person and reading the log at once."""
    settings.HARBOR_WS_RECHECK_SECONDS = 120
    monkeypatch.setattr(consumers, "BEHIND_PATIENCE_SECONDS", 1.0)
    sockets: list[EventsConsumer] = []
    connect_socket = EventsConsumer.connect

    async def recorded(self):
        sockets.append(self)
        await connect_socket(self)

    monkeypatch.setattr(EventsConsumer, "connect", recorded)
    rechecks: list[int] = []
    recheck = socket_reads.recheck_listeners

    def counted(reads):
        rechecks.append(len(reads))
        return recheck(reads)

    monkeypatch.setattr(socket_reads, "recheck_listeners", counted)
    run = await start(people_tx, "alice")
    bob, connected, _ = await connect(user="bob")
    assert connected and await bob.receive_nothing(timeout=0.3)
    (socket,) = sockets
    assert socket.tail is not None
    hub = socket.tail.hub
    checked = len(rechecks)
    held = asyncio.Event()  # another stream of this process, slow to take its pushes

    async def slow(message):
        await held.wait()

    slow_tail = Tail(listening_on(get_channel_layer()), "slow", handler=slow)
    await slow_tail.join(live_push.tenant_group(socket.tenant_id))
    before = await logged()
    await emit(run, 2)
    burst = (await logged())[len(before) :]
    await asyncio.sleep(0.05)
    assert hub.handing_over and socket.cursor < burst[-1]
    socket._behind(burst[-1])
    await asyncio.sleep(3 * consumers.SETTLE_SECONDS)
    held.set()
    assert await receive_until(bob, burst[-1], timeout=3) == burst
    assert len(rechecks) == checked  # delivered from the pushes: nobody re-checked

    # Patience is bounded: a push lost while the process stays busy is read all the same.
    held.clear()
    monkeypatch.setattr(live_push, "push", lambda tenant_id, published: None)
    await emit(run)
    last = (await logged())[-1]
    group = live_push.tenant_group(socket.tenant_id)
    await nudge(group, {"type": "harbor.event", "group": group, "sequence": 0})
    await asyncio.sleep(0.05)
    assert hub.handing_over
    socket._behind(last)
    assert await receive_until(bob, last, timeout=3) == [last]
    assert hub.handing_over and len(rechecks) == checked + 1
    held.set()
    await slow_tail.leave()
    await bob.disconnect()


async def signed_in_socket(username: str) -> tuple[Client, WebsocketCommunicator]:
    """A socket of a login session the test can log out of."""
    client = Client()
    assert await database_sync_to_async(client.login)(username=username, password=f"{username}-password")
    cookie = (
        b"cookie",
        f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}".encode(),
    )
    communicator = WebsocketCommunicator(application, "/ws/events/", headers=[HOST, ORIGIN, cookie])
    assert (await communicator.connect(timeout=5))[0]
    return client, communicator


async def test_logout_closes_that_sessions_socket_at_once(people_tx, settings):
    settings.HARBOR_WS_RECHECK_SECONDS = 60  # not the periodic re-check
    other, _, _ = await connect(user="bob")  # another login session of bob's stays open
    _, second = await signed_in_socket("bob")  # and so does a second password login of his:
    client, mine = await signed_in_socket("bob")  # all act for the session `pages`, yet are apart
    await database_sync_to_async(client.logout)()
    assert await mine.receive_output(timeout=3) == {"type": "websocket.close", "code": 4401}
    assert await other.receive_nothing(timeout=0.5) and await second.receive_nothing(timeout=0.1)
    await other.disconnect()
    await second.disconnect()


async def test_a_logout_whose_close_message_is_lost_still_closes_the_socket(people_tx, settings, monkeypatch):
    """The periodic re-check is the backstop (say the channel layer was down at logout)."""
    settings.HARBOR_WS_RECHECK_SECONDS = 0.2
    monkeypatch.setattr(live_push, "close_streams", lambda **kwargs: None)
    client, mine = await signed_in_socket("bob")
    assert await mine.receive_nothing(timeout=0.5)
    await database_sync_to_async(client.logout)()
    assert await mine.receive_output(timeout=3) == {"type": "websocket.close", "code": 4401}


async def test_a_revoked_membership_closes_the_socket_at_once(people_tx, settings):
    settings.HARBOR_WS_RECHECK_SECONDS = 60  # not the periodic re-check
    bob, connected, _ = await connect(user="bob")
    assert connected
    await revoke(people_tx, "bob")
    assert await bob.receive_output(timeout=3) == {"type": "websocket.close", "code": 4403}


# --- A real Redis that restarts ----------------------------------------------------------


class Redis:
    """A redis-server of the test's own, on a free port, that it may stop and start."""

    def __init__(self) -> None:
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.process = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while subprocess.run(["redis-cli", "-p", str(self.port), "ping"], capture_output=True).stdout != b"PONG\n":
            assert time.monotonic() < deadline, "redis-server did not start"
            time.sleep(0.05)

    def stop(self) -> None:
        assert self.process is not None, "stopped before it started"
        self.process.kill()
        self.process.wait()


@pytest.fixture(params=["pubsub", "channel layer"])
def own_redis(request, settings):
    """A Redis of the test's own, carrying the live pushes over pub/sub (as configured in
    production) or through the channel layer."""
    if not shutil.which("redis-server"):
        pytest.skip("needs redis-server")
    redis = Redis()
    redis.start()
    url = f"redis://127.0.0.1:{redis.port}/0"
    settings.CHANNEL_LAYERS = {
        "default": {"BACKEND": "channels_redis.core.RedisChannelLayer", "CONFIG": {"hosts": [url]}}
    }
    settings.HARBOR_LIVE_REDIS_URL = url if request.param == "pubsub" else None
    settings.HARBOR_STREAM_POLL_SECONDS = 0.2
    settings.HARBOR_WS_RECHECK_SECONDS = 60  # after the restart, only a live nudge is this quick
    channel_layers.backends.clear()
    live_push._push_paused_until = 0.0
    yield redis
    redis.stop()
    channel_layers.backends.clear()
    live_push._push_paused_until = 0.0


async def test_a_socket_survives_a_redis_restart(people_tx, own_redis):
    run = await start(people_tx, "alice")
    bob, connected, _ = await connect(user="bob")
    assert connected
    seen = []

    async def burst(count: int) -> list[int]:
        before = await logged()
        started = time.monotonic()
        await emit(run, count)
        assert time.monotonic() - started < 5  # commits never wait on a dead layer
        new = (await logged())[len(before) :]
        seen.extend(await receive_until(bob, new[-1], timeout=5))
        return new

    expected = await burst(3)
    own_redis.stop()
    expected += await burst(3)  # read from the log while Redis is down
    own_redis.start()
    await asyncio.sleep(2.5)  # the socket re-joins its groups; pushes resume
    assert hub_for(listening_on(get_channel_layer())).up  # no longer polling: only pushes are this quick
    expected += await burst(3)
    assert seen == expected
    assert await bob.receive_nothing(timeout=0.3)
    await bob.disconnect()
