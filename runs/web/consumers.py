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
Pushes reach a socket from its process's Hub (runs.streams.tail) by a direct call, with no
per-socket channel, queue or thread hop; what does read the database (the re-check and the
log after a gap) is batched across the process's sockets, one thread hop per batch.
Nothing here writes: steering goes through the services, like every other client."""

import asyncio
import functools
import logging
import random
import time
import weakref
from collections import Counter, OrderedDict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from importlib import import_module
from typing import Any
from urllib.parse import parse_qs

from channels.consumer import get_handler_name
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from channels.layers import get_channel_layer
from django.conf import settings
from django.contrib.auth import HASH_SESSION_KEY, SESSION_KEY
from django.contrib.auth.models import User
from django.contrib.sessions.backends.base import SessionBase
from django.utils import timezone
from django.utils.crypto import constant_time_compare

from runs.domain import events, selectors
from runs.domain.event_types import Envelope
from runs.identity import sessions
from runs.identity.callers import Caller
from runs.identity.sessions import web_session_for_key
from runs.identity.visibility import Viewer, viewer_of, viewers_of
from runs.kernel.errors import InvalidRequest
from runs.models import Membership
from runs.streams import tail as streams
from runs.streams.tail import Tail, listening_on
from runs.web.frames import frame_text

log = logging.getLogger("harbor.ws")

# Close codes (4000-4999 are the application's): the page shows why it stopped listening.
CLOSE_UNAUTHENTICATED = 4401
CLOSE_FORBIDDEN = 4403
CLOSE_NOT_FOUND = 4404
CLOSE_INVALID = 4400
CLOSE_TOO_MANY = 4429  # the person holds HARBOR_WS_MAX_PER_USER sockets here already: the page retries later
CLOSE_CHANGED = 4409  # the person's role changed: what the page shows (decide buttons, runs) is stale, it reloads

SETTLE_SECONDS = 0.2
# How long a socket behind the head waits for pushes this process is still handing over
# before it reads the rest itself (bounded: a push may have been lost among them).
BEHIND_PATIENCE_SECONDS = 5.0
RECHECK_SLOT_SECONDS = 1.0


# Sockets each person holds open on this process (its one event loop: no lock). Each socket
# costs re-checks and log reads on the process's one reader thread, which every socket's
# delivery shares: the sockets one person may open are bounded.
_open_by_user: Counter[int] = Counter()


def _caller_for(user_id: int, tenant_id: int, session: str) -> Caller | None:
    """The person as a Caller of the tenant they connected in, or None once revoked."""
    membership = (
        Membership.objects.select_related("tenant", "user").filter(user_id=user_id, tenant_id=tenant_id).first()
    )
    if membership is None or not membership.user.is_active:
        return None
    return Caller(tenant=membership.tenant, user=membership.user, session=session)


def _connect_plan(user: User, session: str, page_session: SessionBase | None, run_id: str | None) -> dict:
    # The tenant the page shows: the one chosen in the login session, as the pages use.
    membership = selectors.membership_for_user(user=user, session=page_session)
    if membership is None:
        return {"close": CLOSE_FORBIDDEN}
    caller = _caller_for(user.pk, membership.tenant_id, session)
    if caller is None:
        return {"close": CLOSE_FORBIDDEN}
    if run_id is not None and selectors.run_visible(caller=caller, run_id=run_id) is None:
        return {"close": CLOSE_NOT_FOUND}  # missing and foreign runs look alike
    return {"tenant": caller.tenant.pk, "slug": caller.tenant.slug, "viewer": viewer_of(caller)}


@dataclass(frozen=True, eq=False)
class Read:
    """One socket's read: who listens, in which tenant and login session, after which cursor."""

    user_id: int
    tenant_id: int
    session_key: str
    run_id: str | None
    cursor: int
    types: frozenset[str] | None = None  # the socket's narrowing (?types=), None for all
    log: bool = True  # False: a periodic re-check, which reads the tenant's head, not the log
    # The socket's Viewer while its last re-check is current: a catch-up then reads only the
    # log, under the rule a push is delivered by, and only as far as `upto` (the last push it
    # received: nothing a push would not have delivered). None re-checks the person first.
    viewer: Viewer | None = None
    upto: int = 0


# (close code, envelopes, new cursor, viewer, the tenant's head)
ReadResult = tuple[int | None, list[Envelope], int, Viewer | None, int]
Pending = tuple[Read, "asyncio.Future[ReadResult]"]


# What a login session signs in: the user id and the password-derived hash it was signed in
# with (Django's HASH_SESSION_KEY), or None once logged out or expired.
SignedIn = tuple[str, str] | None


def _signed_in_users(session_keys: set[str]) -> dict[str, SignedIn]:
    """What each login session signs in (SESSION_KEY and its session auth hash)."""
    engine = import_module(settings.SESSION_ENGINE)
    if engine is not sessions:  # another engine: one load per session
        return {key: _signed_in(engine.SessionStore(key).load()) for key in session_keys}
    by_stored = {sessions.stored_key(key): key for key in session_keys}
    rows = (
        sessions.SessionStore.get_model_class()
        .objects.filter(session_key__in=list(by_stored), expire_date__gt=timezone.now())
        .values_list("session_key", "session_data")
        .iterator()
    )
    signed = {by_stored[stored]: _user_signed_in(data) for stored, data in rows}
    return {key: signed.get(key) for key in session_keys}


@functools.lru_cache(maxsize=10_000)
def _user_signed_in(session_data: str) -> SignedIn:
    """What a stored session's data signs in, decoded once per distinct data (it is signed: the
    same data always decodes the same): thousands of sockets re-check every few seconds."""
    return _signed_in(sessions.SessionStore().decode(session_data))


def _signed_in(data: dict[str, Any]) -> SignedIn:
    user_id = data.get(SESSION_KEY)
    return None if user_id is None else (str(user_id), str(data.get(HASH_SESSION_KEY) or ""))


def _still_signed_in(signed: SignedIn, user: User) -> bool:
    """Whether the session still signs this user in, as django.contrib.auth.get_user decides
    for a page: the same user, and the hash of the password it was signed in with (a
    password change ends every other session; SECRET_KEY_FALLBACKS still verify)."""
    if signed is None or signed[0] != str(user.pk) or not signed[1]:
        return False
    if constant_time_compare(signed[1], user.get_session_auth_hash()):
        return True
    return any(constant_time_compare(signed[1], fallback) for fallback in user.get_session_auth_fallback_hash())


def _read_many(reads: list[Read]) -> list[ReadResult]:
    """For each read: a close code once the person may no longer listen, else the next
    envelopes after its cursor, the new cursor, and the person's Viewer (as of now when
    re-checked: role, delegations). The re-checks of a batch take a few queries in all, a
    catch-up under a current Viewer none, and the log is read only for sockets behind their
    tenant's head, once per tenant."""
    heads = selectors.events_heads(tenant_ids={read.tenant_id for read in reads})

    def head_of(read: Read) -> int:  # as far as this read may read
        head = heads.get(read.tenant_id, (0, ""))[0]
        return head if read.viewer is None else min(head, read.upto)

    checked = [
        read
        for read in reads
        if read.viewer is None
        or read.tenant_id not in heads
        or (read.log and head_of(read) - read.cursor > streams.BATCH)
    ]
    signed_here, callers = _recheck(checked)
    closed = set(checked) - set(callers)  # may no longer listen
    viewers = {read: read.viewer for read in reads if read.viewer is not None}
    viewers.update(zip(callers, viewers_of(list(callers.values())), strict=True))
    behind = [read for read in reads if read not in closed and read.log and read.cursor < head_of(read)]
    logs = _logs_after(behind, callers, viewers, {read: head_of(read) for read in behind}, heads)
    results: list[ReadResult] = []
    for read in reads:
        if read in closed:
            close = CLOSE_FORBIDDEN if read.session_key in signed_here else CLOSE_UNAUTHENTICATED
            results.append((close, [], read.cursor, None, 0))
        else:
            envelopes, cursor = logs.get(read, ([], read.cursor))
            results.append((None, envelopes, cursor, viewers[read], heads.get(read.tenant_id, (0, ""))[0]))
    return results


def _recheck(reads: list[Read]) -> tuple[set[str], dict[Read, Caller]]:
    """The login sessions that still sign their person in, and a Caller for each read whose
    person may still listen (signed in, an active member of the tenant)."""
    if not reads:
        return set(), {}
    signed = _signed_in_users({read.session_key for read in reads})
    memberships = {
        (m.user_id, m.tenant_id): m
        for m in Membership.objects.select_related("tenant", "user").filter(
            user_id__in={read.user_id for read in reads}, tenant_id__in={read.tenant_id for read in reads}
        )
    }
    users = {m.user_id: m.user for m in memberships.values()}
    missing = {read.user_id for read in reads} - set(users)
    if missing:  # no membership left: the user is still needed to tell 4401 from 4403
        users.update((user.pk, user) for user in User.objects.filter(pk__in=missing))
    sessions_of = {(read.session_key, read.user_id) for read in reads}  # a hash per session, not per socket
    signed_here = {
        key for key, user_id in sessions_of if user_id in users and _still_signed_in(signed[key], users[user_id])
    }
    callers: dict[Read, Caller] = {}
    for read in reads:
        membership = memberships.get((read.user_id, read.tenant_id))
        if read.session_key in signed_here and membership is not None and membership.user.is_active:
            caller = Caller(
                tenant=membership.tenant, user=membership.user, session=web_session_for_key(read.session_key)
            )
            caller.__dict__["role"] = membership.role  # Caller.role, as it would read it
            callers[read] = caller
    return signed_here, callers


def _logs_after(
    behind: list[Read],
    callers: dict[Read, Caller],
    viewers: dict[Read, Viewer],
    upto: dict[Read, int],
    heads: dict[int, tuple[int, str]],
) -> dict[Read, tuple[list[Envelope], int]]:
    """The log after each cursor: the sockets of a tenant a page or less behind its head
    share one read (a commit that every socket must catch up on costs two queries, not two
    per socket); a socket further behind (one that reconnected after a while, re-checked)
    pages alone."""
    logs: dict[Read, tuple[list[Envelope], int]] = {}
    near: dict[int, list[Read]] = {}
    for read in behind:
        if upto[read] - read.cursor <= streams.BATCH:
            near.setdefault(read.tenant_id, []).append(read)
        else:
            logs[read] = streams.read_after(
                caller=callers[read], cursor=read.cursor, run_id=read.run_id, types=read.types
            )
    for tenant_id, reads in near.items():
        shared = streams.read_after_shared(
            tenant_id=tenant_id,
            tenant_slug=heads[tenant_id][1],
            reads=[(viewers[read], read.cursor, upto[read], read.run_id, read.types) for read in reads],
        )
        logs.update({read: (envelopes, upto[read]) for read, envelopes in zip(reads, shared, strict=True)})
    return logs


class _Reads:
    """The sockets' reads of one event loop, batched: those asked for while a batch runs on
    the database thread go together in the next one (no waiting added when idle).

    A socket far behind its tenant's head (one that reconnected after a while) replays the
    log a page at a time, and each page is a read of its own and a page of frames to send on
    the loop every socket shares. A batch takes at most REPLAYS_PER_TENANT such pages per
    tenant, the rest waiting their turn in order: a crowd replaying one tenant's log slows
    its own replays, not every other socket's deliveries and re-checks."""

    LIMIT = 500
    REPLAYS_PER_TENANT = 4
    # A read waits this long for others to join its batch: the sockets of a re-check slot
    # wake within a few loop turns of each other.
    GATHER_SECONDS = 0.005

    def __init__(self) -> None:
        self.pending: list[Pending] = []
        self.running = False
        self.heads: dict[int, int] = {}  # each tenant's head as the last batch saw it

    def saw_head(self, tenant_id: int, head: int) -> None:
        self.heads[tenant_id] = max(self.heads.get(tenant_id, 0), head)

    def _replaying(self, read: Read) -> bool:
        return read.log and self.heads.get(read.tenant_id, 0) - read.cursor > streams.BATCH

    def _next_batch(self) -> list[Pending]:
        batch: list[Pending] = []
        waiting: list[Pending] = []
        replays: Counter[int] = Counter()
        for read, future in self.pending:
            if future.done():  # a closed socket's
                continue
            replaying = self._replaying(read)
            if len(batch) >= self.LIMIT or (replaying and replays[read.tenant_id] >= self.REPLAYS_PER_TENANT):
                waiting.append((read, future))
                continue
            replays[read.tenant_id] += replaying
            batch.append((read, future))
        self.pending = waiting
        return batch

    async def read(self, read: Read) -> ReadResult:
        future: asyncio.Future[ReadResult] = asyncio.get_running_loop().create_future()
        self.pending.append((read, future))
        if not self.running:
            self.running = True
            asyncio.create_task(self._run())
        return await future

    async def _run(self) -> None:
        try:
            await asyncio.sleep(self.GATHER_SECONDS)
            while self.pending:
                batch = self._next_batch()
                if not batch:
                    continue
                try:
                    results = await database_sync_to_async(_read_many, thread_sensitive=False, executor=_READER)(
                        [read for read, _ in batch]
                    )
                except Exception as error:
                    for _, future in batch:
                        if not future.done():
                            future.set_exception(error)
                    continue
                for (read, future), result in zip(batch, results, strict=True):
                    self.saw_head(read.tenant_id, result[4])
                    if not future.done():
                        future.set_result(result)
        finally:
            self.running = False


# The sockets' reads (re-checks, replays, catch-ups) run on a thread of their own, not the one
# every connect's sign-in and permission check waits for: a crowd of sockets replaying a long
# log would otherwise hold up every other person's handshake past Daphne's timeout.
_READER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="harbor-ws-reader")
_reads: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Reads]" = weakref.WeakKeyDictionary()


def _reads_of_loop() -> _Reads:
    loop = asyncio.get_running_loop()
    reads = _reads.get(loop)
    if reads is None:
        reads = _reads[loop] = _Reads()
    return reads


# Frames rendered once per process and shared by every socket that receives them: an
# event has at most two renderings (with its resume token, and without).
_RENDERED: OrderedDict[tuple[str, int, str, str, bool], str] = OrderedDict()
_RENDERED_MAX = 2048


def rendered(
    item: dict, *, viewer: Viewer, tenant_slug: str, run_id: str | None, types: frozenset[str] | None = None
) -> str | None:
    """The frame of one pushed event as this viewer receives it, or None when it does not
    (streams.push_shown: no database read)."""
    with_token = streams.push_shown(item, viewer=viewer, run_id=run_id, types=types)
    if with_token is None:
        return None
    envelope = item["envelope"]
    key = (tenant_slug, envelope["sequence"], envelope["run"], envelope["occurred_at"], with_token)
    text = _RENDERED.get(key)
    if text is None:
        text = frame_text(streams.pushed_envelope(item, tenant_slug=tenant_slug, with_token=with_token))
        _RENDERED[key] = text
        if len(_RENDERED) > _RENDERED_MAX:
            _RENDERED.popitem(last=False)
    return text


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
        # The page's identity triple: the same session id the page's forms act with.
        self.session_key = getattr(self.scope.get("session"), "session_key", None) or ""
        self.session = web_session_for_key(self.session_key)
        plan = await database_sync_to_async(_connect_plan)(user, self.session, self.scope.get("session"), run_id)
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
        await self.tail.join(events.tenant_group(self.tenant_id), events.user_group(user.pk))
        await self.accept()
        head = await database_sync_to_async(selectors.events_head)(tenant_id=self.tenant_id)
        _reads_of_loop().saw_head(self.tenant_id, head)  # its first read may be a replay already
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
                text = rendered(
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
        if message.get("session") is not None:
            if message["session"] == self.session:
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
                close, envelopes, cursor, viewer, head = await _reads_of_loop().read(read)
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
