"""The websocket event stream of PROTOCOL §5 (extension) for the browser pages.

`/ws/events/` streams the tenant's events the signed-in person may see (the inbox and the
runs list); `/ws/events/?run=<id>` narrows to one run (the run page). `?after=<sequence>`
first replays the durable log after that cursor, so a page that reconnects misses nothing.

Groups are named from server-side ids only; the client's query string picks a run, which
is permission-checked before its group is joined. A group message is only a nudge: the
socket reads what it sends from the durable log after its cursor (`streams.read_after`),
re-checking every few seconds that the person may still see it (and at once on a membership
change; on the embedded default's in-memory layer, only one made in the server's process),
so a push never leaks across tenants or past a revoked membership, and a dropped nudge
costs nothing but a delay.
Pushes reach a socket from its process's Hub (runs.streams.hub) by a direct call, with no
per-socket channel, queue or thread hop; what does read the database (the re-check and the
log after a gap) is batched across the process's sockets, one thread hop per batch.
Nothing here writes: steering goes through the services, like every other client."""

import asyncio
import logging
import random
import time
from collections import Counter
from urllib.parse import parse_qs

from channels.consumer import get_handler_name
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from channels.layers import get_channel_layer
from django.conf import settings

from runs.domain import push, selectors
from runs.identity.sessions import PAGES_SESSION, login_label
from runs.kernel.errors import InvalidRequest
from runs.streams import reads as streams
from runs.streams.hub import listening_on
from runs.streams.tail import Tail
from runs.web.frames import frame_text
from runs.web.sockets.access import (
    CLOSE_CHANGED,
    CLOSE_INVALID,
    CLOSE_TOO_MANY,
    CLOSE_UNAUTHENTICATED,
    connect_plan,
)
from runs.web.sockets.reads import Read
from runs.web.sockets.render_cache import render_pushed
from runs.web.sockets.scheduler import scheduler_of_loop

log = logging.getLogger("harbor.ws")

SETTLE_SECONDS = 0.2
# How long a socket behind the head waits for pushes this process is still handing over
# before it reads the rest itself (bounded: a push may have been lost among them).
BEHIND_PATIENCE_SECONDS = 5.0
RECHECK_SLOT_SECONDS = 1.0


# Sockets each person holds open on this process (its one event loop: no lock). Each socket
# costs re-checks and log reads on the process's one reader thread, which every socket's
# delivery shares: the sockets one person may open are bounded.
_open_by_user: Counter[int] = Counter()


class EventsConsumer(AsyncJsonWebsocketConsumer):
    # No channel of its own in the layer (an alias with no layer configured: Channels then
    # reads only the client): pushes come from the process's Hub straight to
    # `pushed_message`, and the Tail's quiet spells and outages come as ticks (`_tick`), so
    # a Redis restart turns into polling instead of ending the socket.
    channel_layer_alias = "harbor.hub-only"
    tail: Tail | None = None
    pump: asyncio.Task | None = None
    ticker: asyncio.Task | None = None
    holder: int | None = None  # the user whose count of open sockets this one is in

    async def _tick(self) -> None:
        """The Tail's quiet spells and outages, dispatched as Channels dispatches a message."""
        while True:
            await self.dispatch(await self._next_message())

    async def _next_message(self) -> dict:
        assert self.tail is not None  # set by connect, before the ticks start
        # Jittered, then aligned to the next whole RECHECK_SLOT_SECONDS: the sockets due in
        # one slot re-check together, in one batch of reads (_Reads).
        due = time.time() + self._recheck_seconds() * random.uniform(0.5, 1.0)
        slot = min(RECHECK_SLOT_SECONDS, self._recheck_seconds())
        message = await self.tail.next(-(-due // slot) * slot - time.time())
        return message or {"type": "harbor.tick"}

    @staticmethod
    def _recheck_seconds() -> float:
        return float(getattr(settings, "HARBOR_WS_RECHECK_SECONDS", 10))

    async def dispatch(self, message: dict) -> None:
        """Channels' dispatch without closing old database connections on every message: no
        handler here touches the database outside database_sync_to_async, which does so."""
        handler = getattr(self, get_handler_name(message), None)
        if handler is None:
            raise ValueError(f"No handler for message type {message['type']}")
        await handler(message)

    async def pushed_message(self, message: dict) -> None:
        """A message of the socket's groups, handed over by the Hub."""
        kind = message.get("type")
        if kind == "harbor.events":  # every push: straight to its handler
            await self.harbor_events(message)
        elif kind in ("harbor.event", "harbor.close"):
            await self.dispatch(message)

    async def _send_frame(self, text: str) -> None:
        await self.send(text_data=text)

    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self._refuse(CLOSE_UNAUTHENTICATED)
            return
        query = parse_qs(self.scope.get("query_string", b"").decode("latin-1"))
        run_id = (query.get("run") or [None])[0]
        after_raw = (query.get("after") or [""])[0]
        try:
            self.types = streams.event_types((query.get("types") or [""])[0])
        except InvalidRequest:
            await self._refuse(CLOSE_INVALID)
            return
        if (run_id is not None and not (0 < len(run_id) <= 26 and run_id.isascii() and run_id.isalnum())) or (
            after_raw and not streams.is_cursor(after_raw)
        ):
            await self._refuse(CLOSE_INVALID)
            return
        after = int(after_raw) if after_raw else None
        if _open_by_user[user.pk] >= settings.HARBOR_WS_MAX_PER_USER:
            await self._refuse(CLOSE_TOO_MANY)
            return
        _open_by_user[user.pk] += 1  # before any wait: connects at the same moment count too
        self.holder = user.pk
        # The login session this socket belongs to (a logout closes it), apart from the
        # identity's session element, which is the pages' on every login (PAGES_SESSION).
        self.session_key = getattr(self.scope.get("session"), "session_key", None) or ""
        self.login = login_label(self.session_key)
        plan = await database_sync_to_async(connect_plan)(user, PAGES_SESSION, self.scope.get("session"), run_id)
        if "close" in plan:
            await self._refuse(plan["close"])
            return
        self.user_id, self.tenant_id, self.run_id = user.pk, plan["tenant"], run_id
        self.recheck_seconds = self._recheck_seconds()  # once per socket, not from settings per push
        self.tenant_slug, self.viewer = plan["slug"], plan["viewer"]
        self.sending = asyncio.Lock()  # one sender at a time: the log reader or a pushed batch
        self.checked_at = time.monotonic()
        self.pushed = 0  # batches delivered from pushes since the last read of the log
        layer = get_channel_layer()
        assert layer is not None  # settings.CHANNEL_LAYERS
        name = f"ws.{id(self):x}"  # for the logs
        self.settle_after = max(1, layer.get_capacity(name) // 2)
        self.settle: asyncio.TimerHandle | None = None
        self.tail = Tail(listening_on(layer), name, handler=self.pushed_message)
        # Join before taking the cursor: anything committed meanwhile is read from the log.
        # A run page listens to its tenant too and keeps only its run's events.
        await self.tail.join(push.tenant_group(self.tenant_id), push.user_group(user.pk))
        await self.accept()
        head = await database_sync_to_async(selectors.events_head)(tenant_id=self.tenant_id)
        scheduler_of_loop().saw_head(self.tenant_id, head)  # its first read may be a replay already
        self.cursor = streams.starting_cursor(after, head)
        self.vouched = self.cursor  # the last sequence a push announced
        self.wake = asyncio.Event()
        self.catch_up = True  # the next read reads the log (else it only re-checks the person)
        self.recheck = True  # the next read re-checks the person (the first; a tick), else only when due
        self.wake.set()
        self.pump = asyncio.create_task(self._pump())
        self.ticker = asyncio.create_task(self._tick())

    async def _refuse(self, code: int) -> None:
        """Accept, then close with the reason: a handshake refused before its accept reaches a
        browser as a bare 1006 (Daphne answers it with HTTP 403), which a page cannot tell
        from a network drop, so it would reconnect forever."""
        await self.accept()
        await self.close(code=code)

    async def disconnect(self, code: int) -> None:
        if self.holder is not None:
            _open_by_user[self.holder] -= 1
            if not _open_by_user[self.holder]:
                del _open_by_user[self.holder]
            self.holder = None
        for task in (self.ticker, self.pump):
            if task is not None:
                task.cancel()
        settle = getattr(self, "settle", None)
        if settle is not None:
            settle.cancel()
        if self.tail is not None:
            await self.tail.leave()

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None, **kwargs: object) -> None:
        """Clients only listen; anything they send is ignored, undecoded (a flood of large
        frames would otherwise be JSON to parse on the loop every socket shares)."""

    async def harbor_event(self, message: dict) -> None:
        if self.pump is not None and message.get("sequence", 0) > self.cursor:
            self._catch_up()  # nudges coalesce: one read catches up on all of them

    async def harbor_events(self, message: dict) -> None:
        """Events pushed after their commit. When they follow the cursor (nothing missed)
        and the person was re-checked lately, they are delivered from the message itself;
        otherwise the pump reads the log (re-checking the person when due)."""
        if self.pump is None or message.get("sequence", 0) <= self.cursor:
            return
        self.vouched = max(self.vouched, message["sequence"])
        if not self._checked_lately() or self.sending.locked() or message.get("first") != self.cursor + 1:
            self._catch_up()
            return
        async with self.sending:
            for item in message["events"]:
                text = render_pushed(
                    item, viewer=self.viewer, tenant_slug=self.tenant_slug, run_id=self.run_id, types=self.types
                )
                if text is not None:
                    await self._send_frame(text)
            self.cursor = message["sequence"]
            self.pushed += message.get("pushes", 1)  # pushes merged on the way count each
        if self.pushed >= self.settle_after:
            # After many pushed batches in a row the layer may have dropped the last of them
            # (nothing later would reveal the gap): once the burst goes quiet, compare the
            # tenant's head with the cursor (a thousand sockets: one query), and read the log
            # only if they differ.
            if self.settle is not None:
                self.settle.cancel()
            self.settle = asyncio.get_running_loop().call_later(SETTLE_SECONDS, self.wake.set)

    async def harbor_tick(self, message: dict) -> None:
        """A quiet spell: re-check the person (and the log if the tenant moved past the
        cursor without a push); a failing layer: read the log."""
        if self.pump is not None:
            self.catch_up = self.catch_up or not (self.tail and self.tail.up)
            self.recheck = True
            self.wake.set()

    async def harbor_close(self, message: dict) -> None:
        """Logout (this login session) closes at once; a membership change is re-checked."""
        if message.get("login") is not None:
            if message["login"] == self.login:
                await self.close(code=CLOSE_UNAUTHENTICATED)
        elif self.pump is not None:
            self.checked_at = 0.0  # nothing is delivered from a push before the re-check
            self._catch_up()

    def _checked_lately(self) -> bool:
        """Whether the person's last re-check is current: the quiet-spell tick re-checks every
        interval, and one may be under way (twice the interval). Until then a push is
        delivered from its message, and a catch-up reads the log under the same Viewer."""
        return time.monotonic() - self.checked_at <= 2 * self.recheck_seconds

    def _catch_up(self) -> None:
        self.catch_up = True
        self.wake.set()

    def _behind(self, head: int, waited: float = 0.0) -> None:
        """A read saw the tenant's head past the cursor: unless the push of those events has
        arrived since, it was lost; read the log. While this process is still handing pushes
        over (a fan-out to thousands of sockets takes a while), it is most likely among them:
        wait for them rather than re-check every socket at once."""
        if self.cursor >= head:
            return
        assert self.tail is not None
        if self.tail.hub.handing_over and waited < BEHIND_PATIENCE_SECONDS:
            asyncio.get_running_loop().call_later(SETTLE_SECONDS, self._behind, head, waited + SETTLE_SECONDS)
            return
        self.recheck = True  # rare (a lost push): read as far as the head, re-checked
        self._catch_up()

    async def _pump(self) -> None:
        """The one sender: reads after the cursor in sequence order, so nothing is sent twice."""
        try:
            await self._send_new()
        except Exception:  # the page reconnects with ?after= and misses nothing
            log.exception("websocket stream of user %s failed", self.user_id)
            await self.close(code=1011)

    async def _send_new(self) -> None:
        while True:
            await self.wake.wait()
            self.wake.clear()
            while True:
                # Read without holding the sender: pushes keep arriving meanwhile (a re-check
                # usually finds nothing new), and what they sent is skipped below.
                # A catch-up between re-checks (a gap, a burst gone quiet) reads only the log:
                # a thousand sockets catching up re-check no one.
                recheck = self.recheck or not self._checked_lately()
                viewer = None if recheck else self.viewer
                read = Read(
                    self.user_id,
                    self.tenant_id,
                    self.session_key,
                    self.run_id,
                    self.cursor,
                    self.types,
                    self.catch_up,
                    viewer,
                    self.vouched,
                )
                self.catch_up = self.recheck = False
                close, envelopes, cursor, viewer, head = await scheduler_of_loop().read(read)
                if close is None and recheck and viewer is not None and viewer.role != self.viewer.role:
                    close = CLOSE_CHANGED
                if close is not None:
                    await self.close(code=close)
                    return
                async with self.sending:
                    self.viewer, self.pushed = viewer, 0
                    if recheck:
                        self.checked_at = time.monotonic()
                    for envelope in envelopes:
                        if envelope["sequence"] > self.cursor:  # else a push delivered it already
                            await self._send_frame(frame_text(envelope))
                    self.cursor = max(self.cursor, cursor)
                if head > self.cursor:  # a re-check, or a catch-up as far as its pushes: the rest's
                    # push may still be on the way; if it never comes, read it (re-checked)
                    asyncio.get_running_loop().call_later(SETTLE_SECONDS, self._behind, head)
                if len(envelopes) < streams.BATCH:
                    break
