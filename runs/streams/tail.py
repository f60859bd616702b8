"""The live tail shared by the SSE stream and the websockets.

What a stream sends comes only from the durable log, read by sequence after the stream's
cursor: sequences are allocated under the tenant row's lock and committed in that order, so
a read by `sequence > cursor` never skips a late commit, and a single cursor never sends an
event twice. The channel layer only nudges ("the log grew"); nudges may be dropped (a full
inbox, a Redis restart) and a stream then catches up on its next read. `Tail` listens for
nudges without ever depending on the layer: while it fails, the stream polls the log.

A process holds one membership per group in the layer, not one per stream (`Hub`): the
layer sends each push once to each process, which hands it to its streams of that group
in memory. A thousand sockets of one tenant cost the layer one message, not a thousand
copies and a thousand queues. Where Redis is configured, the Hub listens on Redis pub/sub
instead of the channel layer (runs.domain.pubsub), with the same contract."""

import asyncio
import logging
import time
import weakref
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from typing import TypeAlias, cast

from channels.layers import BaseChannelLayer
from django.conf import settings

from approvals.domain.selectors import token_visibility
from approvals.models import Pause
from runs.domain import events, pubsub, selectors
from runs.domain.event_types import Envelope
from runs.domain.tokens import sign_in_open, sign_in_unseal, token_unseal
from runs.identity.callers import Caller
from runs.identity.visibility import Viewer
from runs.kernel.errors import InvalidRequest
from runs.models import Event

log = logging.getLogger("harbor.streams")

BATCH = 200
MAX_TYPES = 50
CURSOR_DIGITS = 18  # a stream's cursor (Last-Event-ID, ?after=): a sequence fits a bigint


def is_cursor(raw: str) -> bool:
    """A stream's cursor as a client writes it (Last-Event-ID, ?after=): ASCII digits, at
    most CURSOR_DIGITS of them (int() alone takes signs, spaces, underscores and other
    scripts' digits)."""
    return raw.isascii() and raw.isdigit() and len(raw) <= CURSOR_DIGITS


def starting_cursor(cursor: int | None, head: int) -> int:
    """Where a stream starts: after the client's cursor, or at the tenant's head without one.
    A cursor past the head (from a log reset since, or made up) starts at the head too: it
    would hear nothing until the log grew past it."""
    return head if cursor is None else min(cursor, head)


def event_types(value: str) -> frozenset[str] | None:
    """A stream's narrowing to named event types ("a,b"; SSE's X-Harbor-Event-Type, a
    websocket's ?types=), None for every type."""
    names = frozenset(part.strip() for part in value.split(",") if part.strip())
    if len(names) > MAX_TYPES or any(len(n) > 64 for n in names):
        raise InvalidRequest(f"name at most {MAX_TYPES} event types of up to 64 characters")
    return names or None


def read_after(
    *,
    caller: Caller,
    cursor: int,
    run_id: str | None = None,
    types: frozenset[str] | None = None,
    tenant_wide: bool = False,
) -> tuple[list[Envelope], int]:
    """The envelopes of the next visible events after `cursor`, and the new cursor. When the
    batch is not full, every event up to the head read first has been seen, so the cursor
    moves past invisible ones too. Tokens are re-checked here, at send time."""
    head = selectors.events_head(tenant_id=caller.tenant.pk)
    batch = selectors.events_after(
        caller=caller, after=cursor, run_id=run_id, types=types, tenant_wide=tenant_wide, limit=BATCH
    )
    may_see_token = token_visibility(caller=caller, pause_ids=[e.payload.get("_pause") for e in batch])
    envelopes = [
        events.envelope(e, tenant_slug=caller.tenant.slug, with_tokens=may_see_token(e.payload.get("_pause")))
        for e in batch
    ]
    new_cursor = batch[-1].sequence if batch else cursor
    if len(batch) < BATCH:
        new_cursor = max(new_cursor, head)
    return envelopes, new_cursor


def read_after_shared(
    *, tenant_id: int, tenant_slug: str, reads: list[tuple[Viewer, int, int, str | None, frozenset[str] | None]]
) -> list[list[Envelope]]:
    """`read_after` for many streams of one tenant, each reading the events after its cursor
    up to a head at most BATCH later (viewer, cursor, head, run or None, types or None): one
    read of the log, and of the pauses whose tokens it carries, then the visibility rule
    applied per stream on the rows read (`Viewer`, the rule the queries apply). A thousand
    sockets catching up on one commit cost two queries, not a few thousand. Each stream's
    cursor moves to its head."""
    low, high = min(cursor for _, cursor, _, _, _ in reads), max(head for _, _, head, _, _ in reads)
    assert all(head - cursor <= BATCH for _, cursor, head, _, _ in reads), "further behind: page with read_after"
    owned = selectors.events_between(tenant_id=tenant_id, after=low, upto=high)
    rows = [row for row, _ in owned]
    pause_ids = {row.payload["_pause"] for row in rows if row.payload.get("_token_keys")}
    pauses = {pause.pk: pause for pause in Pause.objects.filter(pk__in=pause_ids, tenant_id=tenant_id)}
    plain = {row.sequence: events.envelope(row, tenant_slug=tenant_slug, with_tokens=False) for row in rows}
    with_token: dict[int, Envelope] = {}

    def shown(row: Event, viewer: Viewer) -> Envelope:
        pause = pauses.get(row.payload.get("_pause"))
        if pause is None or not viewer.may_decide(
            pause_id=pause.pk, user=pause.identity_user, session=pause.identity_session, cause=pause.cause
        ):
            return plain[row.sequence]
        if row.sequence not in with_token:
            token = token_unseal(pause.token_sealed) if pause.token_sealed else None
            shown = events.capabilities(row.payload["_token_keys"], token, sign_in_unseal(pause.payload))
            payload = {**plain[row.sequence]["payload"], **shown}
            with_token[row.sequence] = {**plain[row.sequence], "payload": payload}
        return with_token[row.sequence]

    return [
        [
            shown(row, viewer)
            for row, owner_id in owned
            if cursor < row.sequence <= head
            and (run_id is None or row.run_id == run_id)
            and (types is None or row.type in types)
            and viewer.sees_run(owner_id=owner_id, run_id=row.run_id)
        ]
        for viewer, cursor, head, run_id, types in reads
    ]


def push_shown(
    item: dict, *, viewer: Viewer, run_id: str | None = None, types: frozenset[str] | None = None
) -> bool | None:
    """Whether a stream receives a pushed event (push._published) and, if it does, whether
    with its resume token: the visibility rule on the inputs the push carries (the run's
    owner, the pausing identity), no database read. None: the stream does not receive it."""
    envelope = item["envelope"]
    if (run_id is not None and envelope["run"] != run_id) or (types is not None and envelope["type"] not in types):
        return None
    if not viewer.sees_run(owner_id=item["owner"], run_id=envelope["run"]):
        return None
    pause = item.get("pause")
    return (
        pause is not None
        and bool(pause["keys"])
        and viewer.may_decide(pause_id=pause["id"], user=pause["user"], session=pause["session"], cause=pause["cause"])
    )


def pushed_envelope(item: dict, *, tenant_slug: str, with_token: bool) -> Envelope:
    """A pushed event's envelope as `read_after` would return it."""
    envelope = cast(Envelope, {**item["envelope"], "tenant": tenant_slug})
    pause = item.get("pause")
    if with_token and pause is not None:
        token = token_unseal(pause["sealed"]) if pause["sealed"] else None
        shown = events.capabilities(pause["keys"], token, sign_in_open(pause.get("sign_in")))
        envelope["payload"] = {**envelope["payload"], **shown}
    return envelope


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
        self.tails: dict[str, set[Tail]] = {}
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

    async def add(self, tail: "Tail", groups: Iterable[str]) -> bool:
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

    async def remove(self, tail: "Tail", groups: Iterable[str]) -> None:
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
