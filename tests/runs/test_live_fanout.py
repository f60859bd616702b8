"""The live fan-out: one channel-layer membership per group per process (streams.Hub), each
message only to the streams of the group it names; the sockets' re-checks batched, in a
fixed number of queries however many sockets; a push that never came is read from the log
after the next re-check."""

import asyncio
import dataclasses

import pytest
from channels.db import database_sync_to_async
from channels.layers import InMemoryChannelLayer, get_channel_layer
from django.conf import settings
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from approvals.models import Pause
from runs.domain import events, selectors
from runs.domain import push as live_push
from runs.identity.permissions import delegate
from runs.identity.visibility import viewer_of, viewers_of
from runs.runtime.dispatch import drain
from runs.streams import reads as streams
from runs.streams.hub import hub_for
from runs.streams.tail import Tail
from runs.web.sockets import access, scheduler
from runs.web.sockets import reads as socket_reads

from .test_consumer_delivery import emit, logged, receive_until
from .test_consumers import connect, start

pytestmark = [pytest.mark.asyncio, pytest.mark.django_db(transaction=True)]


async def test_a_group_has_one_membership_per_process_and_a_message_reaches_only_its_group():
    layer = InMemoryChannelLayer()
    got: dict[str, list[dict]] = {"a1": [], "a2": [], "b": []}

    def tail(name: str) -> Tail:
        async def handler(message: dict) -> None:
            got[name].append(message)

        return Tail(layer, name, handler=handler)

    a1, a2, b = tail("a1"), tail("a2"), tail("b")
    await a1.join("tenant.1")
    await a2.join("tenant.1")
    await b.join("tenant.2")
    assert len(layer.groups["tenant.1"]) == 1 and layer.groups["tenant.1"].keys() == layer.groups["tenant.2"].keys()

    await layer.group_send("tenant.1", {"type": "harbor.events", "group": "tenant.1", "sequence": 1})
    await layer.group_send("tenant.1", {"type": "harbor.events", "group": "tenant.2", "sequence": 2})
    await layer.group_send("tenant.1", {"type": "harbor.events", "sequence": 3})  # names no group: dropped
    await layer.group_send("tenant.2", {"type": "harbor.events", "group": "tenant.2", "sequence": 4})
    await asyncio.sleep(0.1)
    assert [m["sequence"] for m in got["a1"]] == [1] and [m["sequence"] for m in got["a2"]] == [1]
    assert [m["sequence"] for m in got["b"]] == [2, 4]  # by the group named, never another's

    await a1.leave()
    assert "tenant.1" in layer.groups  # a2 still listens
    await a2.leave()
    await b.leave()
    assert not layer.groups.get("tenant.1") and not layer.groups.get("tenant.2")
    hub_for(layer).reader.cancel()  # type: ignore[union-attr]


class HandedLayer:
    """A channel layer whose next message the test hands over."""

    def __init__(self) -> None:
        self.next: asyncio.Future[dict] | None = None

    async def new_channel(self, prefix: str = "") -> str:
        return prefix + "only"

    async def group_add(self, group: str, channel: str) -> None:
        pass

    async def group_discard(self, group: str, channel: str) -> None:
        pass

    async def receive(self, channel: str) -> dict:
        self.next = asyncio.get_running_loop().create_future()
        return await self.next


async def test_a_reader_cancelled_as_a_message_arrives_stops():
    """A server's shutdown (or a test's loop) cancels the Hub's reader; a message arriving at
    that moment must not swallow the cancel, or the shutdown waits on the reader forever."""

    async def handler(message: dict) -> None:
        pass

    layer = HandedLayer()
    tail = Tail(layer, "t", handler=handler)
    await tail.join("tenant.1")
    await asyncio.sleep(0.01)  # the reader waits for the layer
    reader = tail.hub.reader
    assert layer.next is not None and reader is not None
    layer.next.set_result({"type": "harbor.events", "group": "tenant.1", "sequence": 1})
    reader.cancel()
    done, _ = await asyncio.wait([reader], timeout=1)
    assert done and reader.cancelled()


async def test_pushes_queued_behind_a_fan_out_go_out_as_one_when_each_follows_the_last():
    layer = InMemoryChannelLayer()
    got: list[dict] = []
    first_delivery = asyncio.Event()

    async def handler(message: dict) -> None:
        got.append(message)
        if len(got) == 1:
            await first_delivery.wait()  # a slow fan-out: the next pushes queue meanwhile

    def push(first: int, last: int) -> dict:
        events = list(range(first, last + 1))
        return {
            "type": "harbor.events",
            "group": "g",
            "first": first,
            "sequence": last,
            "runs": [f"r{first}"],
            "events": events,
        }

    tail = Tail(layer, "t", handler=handler)
    await tail.join("g")
    await layer.group_send("g", push(1, 1))
    await asyncio.sleep(0.05)
    for message in (push(2, 3), push(4, 4), push(6, 6), {"type": "harbor.close", "group": "g"}, push(7, 7)):
        await layer.group_send("g", message)
    await asyncio.sleep(0.05)
    first_delivery.set()
    await asyncio.sleep(0.05)
    assert [(m["type"], m.get("first"), m.get("sequence")) for m in got] == [
        ("harbor.events", 1, 1),
        ("harbor.events", 2, 4),  # 2-3 and 4, in order
        ("harbor.events", 6, 6),  # after a gap: as it came, so the socket sees the gap
        ("harbor.close", None, None),
        ("harbor.events", 7, 7),  # nothing is merged across another message
    ]
    assert got[1]["events"] == [2, 3, 4] and got[1]["runs"] == ["r2", "r4"]
    await tail.leave()
    hub_for(layer).reader.cancel()  # type: ignore[union-attr]


async def test_the_sockets_of_a_tenant_share_one_membership_and_each_receive_the_push(people_tx):
    layer = get_channel_layer()
    run = await start(people_tx, "alice")
    sockets = []
    for user in ("bob", "olivia", "bob"):
        communicator, connected, _ = await connect(user=user)
        assert connected
        sockets.append(communicator)
    if isinstance(layer, InMemoryChannelLayer):
        assert len(layer.groups[live_push.tenant_group(people_tx.acme.pk)]) == 1
    await emit(run)
    last = (await logged())[-1]
    for communicator in sockets:
        assert (await receive_until(communicator, last))[-1] == last
        await communicator.disconnect()


@database_sync_to_async
def reads_for(people, users: list[str]) -> list[socket_reads.Read]:
    reads = []
    for user in users:
        client = Client()
        caller = people.caller(user)
        client.force_login(caller.user)
        reads.append(
            socket_reads.Read(
                caller.user.pk, people.acme.pk, client.cookies[settings.SESSION_COOKIE_NAME].value, None, 0, log=False
            )
        )
    return reads


@database_sync_to_async
def queries_of(reads: list[socket_reads.Read]) -> tuple[int, list]:
    with CaptureQueriesContext(connection) as queries:
        results = socket_reads.read_many(reads)
    return len(queries.captured_queries), results


async def test_the_recheck_of_many_sockets_takes_the_queries_of_one(people_tx):
    await queries_of(await reads_for(people_tx, ["bob"]))  # content types are cached from now on
    one, results_one = await queries_of(await reads_for(people_tx, ["bob"]))
    many, results_many = await queries_of(await reads_for(people_tx, ["bob", "olivia", "alice", "ada", "mallory"]))
    assert one == many == 4  # login sessions, memberships, delegations, the tenant's head
    assert all(close is None for close, *_ in results_many)
    assert [viewer.role for _, _, _, viewer, _ in results_many] == ["approver", "operator", "member", "admin", "member"]


async def test_a_batched_recheck_closes_only_the_socket_that_may_no_longer_listen(people_tx):
    reads = await reads_for(people_tx, ["bob", "olivia"])
    await database_sync_to_async(lambda: people_tx.acme.memberships.filter(user__username="olivia").delete())()
    _, results = await queries_of(reads)
    assert [close for close, *_ in results] == [None, access.CLOSE_FORBIDDEN]
    signed_out = socket_reads.Read(reads[0].user_id, people_tx.acme.pk, "no-such-session", None, 0, log=False)
    _, results = await queries_of([signed_out, reads[0]])
    assert [close for close, *_ in results] == [access.CLOSE_UNAUTHENTICATED, None]


@database_sync_to_async
def delegated_callers(people):
    alice, mallory = people.caller("alice"), people.caller("mallory")
    run = start.func(people, "alice", "launch", "probe")
    drain()
    delegate(run, user=mallory.user, permission="view_run")
    delegate(Pause.objects.get(run=run), user=mallory.user, permission="decide_pause")
    callers = [alice, mallory, people.caller("bob")]
    return [viewer_of(c) for c in callers], viewers_of(callers)


async def test_the_batched_viewers_are_the_viewers_one_by_one(people_tx, probe):
    one_by_one, batched = await delegated_callers(people_tx)
    assert batched == one_by_one
    assert batched[1].runs and batched[1].decides  # mallory's delegations are in


async def test_a_push_that_never_came_is_read_from_the_log_after_the_recheck(people_tx, settings, monkeypatch):
    settings.HARBOR_WS_RECHECK_SECONDS = 0.3
    run = await start(people_tx, "alice")
    bob, connected, _ = await connect(user="bob")
    assert connected
    assert await bob.receive_nothing(timeout=0.5)
    monkeypatch.setattr(live_push, "push", lambda tenant_id, published: None)  # every push lost
    await emit(run)
    last = (await logged())[-1]
    assert (await receive_until(bob, last, timeout=5))[-1] == last
    await bob.disconnect()


@database_sync_to_async
def shared_and_one_by_one(people):
    """Every socket's log read, shared and one by one: owners in and out of the pausing
    session, each role, a member with a run delegated to her (not its pause), run pages."""
    run = start.func(people, "alice", "launch", "probe")
    drain()
    start.func(people, "mallory")
    delegate(run, user=people.caller("mallory").user, permission="view_run")
    callers = [people.caller(user) for user in ("alice", "bob", "olivia", "ada", "mallory")]
    callers.append(people.caller("alice", session="s2"))
    head = selectors.events_head(tenant_id=people.acme.pk)
    narrowed = frozenset({events.PAUSE_REQUESTED, events.TASK_SPAWNED})
    reads = [
        (caller, cursor, run_id, types)
        for caller in callers
        for cursor in (0, 3)
        for run_id in (None, run.pk)
        for types in (None, narrowed)
    ]
    shared = streams.read_after_shared(
        tenant_id=people.acme.pk,
        tenant_slug="acme",
        reads=[(viewer_of(caller), cursor, head, run_id, types) for caller, cursor, run_id, types in reads],
    )
    one_by_one = [
        streams.read_after(caller=caller, cursor=cursor, run_id=run_id, types=types)
        for caller, cursor, run_id, types in reads
    ]
    return shared, one_by_one, head


async def test_the_shared_log_read_is_each_sockets_read_one_by_one(people_tx, probe):
    shared, one_by_one, head = await shared_and_one_by_one(people_tx)
    assert shared == [envelopes for envelopes, _ in one_by_one]
    assert {cursor for _, cursor in one_by_one} == {head}  # the cursor each moves to
    tokens = {e["payload"]["PauseToken"] for envelopes in shared for e in envelopes if "PauseToken" in e["payload"]}
    assert None in tokens and len(tokens) == 2  # shown to some sockets, not to others
    assert len({len(envelopes) for envelopes in shared}) > 2  # the rule kept some events from some


async def test_the_log_read_of_many_sockets_behind_takes_the_queries_of_one(people_tx):
    run = await start(people_tx, "alice")
    await emit(run, 3)

    async def behind(users: list[str]) -> tuple[int, list]:
        return await queries_of([dataclasses.replace(r, log=True) for r in await reads_for(people_tx, users)])

    await behind(["bob"])  # content types are cached from now on
    one, results_one = await behind(["bob"])
    many, results_many = await behind(["bob", "olivia", "alice", "ada", "mallory"])
    assert one == many == 5  # the re-check's 4, then the log once for all (no pause here: no token)
    assert results_many[0][1] == results_one[0][1] and results_one[0][1]  # bob's events, either way
    assert {cursor for _, _, cursor, _, _ in results_many} == {(await logged())[-1]}


async def test_a_catch_up_under_a_current_viewer_reads_only_the_log_as_far_as_it_was_vouched_for(people_tx):
    """Between re-checks a socket catches up under the Viewer it holds, as far as a push or
    its last re-check vouched for: many sockets behind cost the head and the log, no
    re-check; one too far behind to share the read is re-checked and pages alone."""
    run = await start(people_tx, "alice")
    await emit(run, 3)
    head = (await logged())[-1]
    reads = await reads_for(people_tx, ["bob", "olivia", "alice", "ada", "mallory"])
    _, checked = await queries_of([dataclasses.replace(r, log=True) for r in reads])
    current = [
        dataclasses.replace(r, log=True, viewer=result[3], upto=head) for r, result in zip(reads, checked, strict=True)
    ]
    count, trusted = await queries_of(current)
    assert count == 2  # the tenant's head, and the log once for all
    assert trusted == checked
    await emit(run)  # committed after what was vouched for: left to its push or the re-check
    _, again = await queries_of(current)
    assert [(envelopes, cursor) for _, envelopes, cursor, _, _ in again] == [(r[1], head) for r in trusted]
    await emit(run, streams.BATCH + 1)
    count, (far,) = await queries_of([dataclasses.replace(current[0], upto=head + streams.BATCH + 1)])
    assert count > 2 and far[3] == checked[0][3] and len(far[1]) == streams.BATCH  # re-checked, a page


async def test_a_crowd_replaying_one_tenants_log_takes_a_few_pages_per_batch(people_tx, monkeypatch):
    """Sockets far behind replay a page per read; a batch takes only a few of one tenant's,
    so a socket of another tenant, near its head, is read in the first batch, not after the
    crowd's pages, and every replaying socket still gets its page, in the order asked."""
    run = await start(people_tx, "alice")
    await emit(run, streams.BATCH + 50)
    await start(people_tx, "gina")
    batches: list[list[socket_reads.Read]] = []

    def recording(reads: list[socket_reads.Read]) -> list:
        batches.append(list(reads))
        return read_many(reads)

    read_many = socket_reads.read_many
    monkeypatch.setattr(socket_reads, "read_many", recording)
    per_batch = scheduler.ReadScheduler.REPLAYS_PER_TENANT
    (olivia,) = await reads_for(people_tx, ["olivia"])  # an operator: she sees the whole log
    crowd = [dataclasses.replace(olivia, log=True) for _ in range(3 * per_batch)]
    (gina,) = await reads_for(people_tx, ["gina"])
    globex = people_tx.globex.pk
    head = await database_sync_to_async(selectors.events_head)(tenant_id=globex)
    near = dataclasses.replace(gina, tenant_id=globex, log=True, cursor=head - 1)
    reads = scheduler.ReadScheduler()
    reads.saw_head(people_tx.acme.pk, (await logged())[-1])  # as each socket's connect does
    results = await asyncio.gather(*(reads.read(read) for read in [*crowd, near]))
    assert [sum(read in crowd for read in batch) for batch in batches] == [per_batch] * 3
    assert near in batches[0]
    assert [read for batch in batches for read in batch if read in crowd] == crowd
    assert all(close is None and len(envelopes) == streams.BATCH for close, envelopes, *_ in results[:-1])
    assert [envelope["type"] for envelope in results[-1][1]] == ["task.spawned"]  # gina's run, nothing of acme's
