"""The websocket event stream of PROTOCOL §5 (extension) for the browser pages.

`/ws/events/` streams the tenant's events the signed-in person may see (the inbox and the
runs list); `/ws/events/?run=<id>` narrows to one run (the run page). `?after=<sequence>`
first replays the durable log after that cursor, so a page that reconnects misses nothing.

Groups are named from server-side ids only; the client's query string picks a run, which
is permission-checked before its group is joined. A group message is only a nudge: the
socket reads what it sends from the durable log after its cursor (`streams.read_after`),
re-checking on every read that the person may still see it, so a push never leaks across
tenants or past a revoked membership, and a dropped nudge costs nothing but a delay.
Nothing here writes: steering goes through the services, like every other client."""

import asyncio
import json
import logging
import random
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from importlib import import_module
from typing import Any
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.conf import settings
from django.contrib.auth import SESSION_KEY
from django.contrib.auth.models import User
from django.contrib.sessions.backends.base import SessionBase

from approvals.domain.tokens import token_unseal
from runs.domain import events, selectors, streams
from runs.domain.event_types import Envelope
from runs.domain.streams import Tail
from runs.identity.callers import Caller
from runs.identity.sessions import web_session_for_key
from runs.identity.visibility import Viewer, viewer_of
from runs.models import Membership

log = logging.getLogger("harbor.ws")

# Close codes (4000-4999 are the application's): the page shows why it stopped listening.
CLOSE_UNAUTHENTICATED = 4401
CLOSE_FORBIDDEN = 4403
CLOSE_NOT_FOUND = 4404
CLOSE_INVALID = 4400

SETTLE_SECONDS = 0.2


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


def _signed_in(session_key: str, user_id: int) -> bool:
    """The login session still signs this person in: a logout (or expiry) ends it."""
    data = import_module(settings.SESSION_ENGINE).SessionStore(session_key).load()
    return data.get(SESSION_KEY) == str(user_id)


def _read(
    user_id: int, tenant_id: int, session_key: str, run_id: str | None, cursor: int
) -> tuple[int | None, list[Envelope], int, Viewer | None]:
    """A close code once the person may no longer listen, else the next envelopes after
    the cursor, the new cursor, and the person's Viewer as of now (role, delegations)."""
    if not _signed_in(session_key, user_id):
        return CLOSE_UNAUTHENTICATED, [], cursor, None
    caller = _caller_for(user_id, tenant_id, web_session_for_key(session_key))
    if caller is None:
        return CLOSE_FORBIDDEN, [], cursor, None
    envelopes, cursor = streams.read_after(caller=caller, cursor=cursor, run_id=run_id)
    return None, envelopes, cursor, viewer_of(caller)


# Frames rendered once per process and shared by every socket that receives them: an
# event has at most two renderings (with its resume token, and without).
_RENDERED: OrderedDict[tuple[str, int, str, str, bool], str] = OrderedDict()
_RENDERED_MAX = 2048


def rendered(item: dict, *, viewer: Viewer, tenant_slug: str, run_id: str | None) -> str | None:
    """The frame of one pushed event as this viewer receives it, or None when it may not
    see it: the visibility rule on the inputs the push carries, no database read. A resume
    token is filled in only for a viewer the decision rule would accept."""
    envelope = item["envelope"]
    if run_id is not None and envelope["run"] != run_id:
        return None
    if not viewer.sees_run(owner_id=item["owner"], run_id=envelope["run"]):
        return None
    pause = item.get("pause")
    with_token = (
        pause is not None
        and bool(pause["keys"])
        and viewer.may_decide(pause_id=pause["id"], user=pause["user"], session=pause["session"], cause=pause["cause"])
    )
    key = (tenant_slug, envelope["sequence"], envelope["run"], envelope["occurred_at"], with_token)
    text = _RENDERED.get(key)
    if text is None:
        frame = {**envelope, "tenant": tenant_slug}
        if with_token and pause is not None:
            token = token_unseal(pause["sealed"])
            frame["payload"] = {**envelope["payload"], **{k: token for k in pause["keys"]}}
        text = json.dumps(frame)
        _RENDERED[key] = text
        if len(_RENDERED) > _RENDERED_MAX:
            _RENDERED.popitem(last=False)
    return text


class EventsConsumer(AsyncJsonWebsocketConsumer):
    tail: Tail | None = None
    pump: asyncio.Task | None = None

    @property
    def channel_receive(self) -> Callable[[], Awaitable[dict[str, Any]]]:
        return self._next_message

    @channel_receive.setter
    def channel_receive(self, receive: Callable[[], Awaitable[dict[str, Any]]]) -> None:
        # Channels' dispatch loop ends the socket if the layer's receive raises (a Redis
        # restart): it reads through a Tail instead, which turns an outage into polling.
        self.tail = Tail(self.channel_layer, self.channel_name)

    async def _next_message(self) -> dict:
        assert self.tail is not None  # set with channel_receive, before any message
        # After many pushed batches in a row the channel may have overflowed and dropped
        # the last of them (nothing later would reveal the gap): read the log once the
        # inbox goes quiet.
        settle = getattr(self, "pushed", 0) >= getattr(self, "settle_after", 1 << 30)
        # Jittered, so sockets opened together do not all re-check at the same moment (their
        # reads would queue, and a push arriving meanwhile would wait behind them).
        quiet = self._recheck_seconds() * random.uniform(0.5, 1.0)
        message = await self.tail.next(SETTLE_SECONDS if settle else quiet)
        return message or {"type": "harbor.tick"}

    @staticmethod
    def _recheck_seconds() -> float:
        return float(getattr(settings, "HARBOR_WS_RECHECK_SECONDS", 10))

    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return
        query = parse_qs(self.scope.get("query_string", b"").decode("latin-1"))
        run_id = (query.get("run") or [None])[0]
        after_raw = (query.get("after") or [None])[0]
        try:
            after = int(after_raw) if after_raw not in (None, "") else None
        except ValueError:
            after = None
        if (run_id is not None and not (0 < len(run_id) <= 26 and run_id.isalnum())) or (
            after is not None and after < 0
        ):
            await self.close(code=CLOSE_INVALID)
            return
        # The page's identity triple: the same session id the page's forms act with.
        self.session_key = getattr(self.scope.get("session"), "session_key", None) or ""
        self.session = web_session_for_key(self.session_key)
        plan = await database_sync_to_async(_connect_plan)(user, self.session, self.scope.get("session"), run_id)
        if "close" in plan:
            await self.close(code=plan["close"])
            return
        self.user_id, self.tenant_id, self.run_id = user.pk, plan["tenant"], run_id
        self.tenant_slug, self.viewer = plan["slug"], plan["viewer"]
        self.sending = asyncio.Lock()  # one sender at a time: the log reader or a pushed batch
        self.checked_at = time.monotonic()
        self.pushed = 0  # batches delivered from pushes since the last read of the log
        self.settle_after = max(1, self.channel_layer.get_capacity(self.channel_name) // 2)
        # Join before taking the cursor: anything committed meanwhile is read from the log.
        assert self.tail is not None
        # A run page listens to its tenant too and keeps only its run's events.
        await self.tail.join(events.tenant_group(self.tenant_id), events.user_group(user.pk))
        await self.accept()
        self.cursor = (
            after
            if after is not None
            else await database_sync_to_async(selectors.events_head)(tenant_id=self.tenant_id)
        )
        self.wake = asyncio.Event()
        self.wake.set()
        self.pump = asyncio.create_task(self._pump())

    async def disconnect(self, code: int) -> None:
        if self.pump is not None:
            self.pump.cancel()
        if self.tail is not None:
            await self.tail.leave()

    async def receive_json(self, content: object, **kwargs: object) -> None:
        """Clients only listen; anything they send is ignored."""

    async def harbor_event(self, message: dict) -> None:
        if self.pump is not None and message.get("sequence", 0) > self.cursor:
            self.wake.set()  # nudges coalesce: one read catches up on all of them

    async def harbor_events(self, message: dict) -> None:
        """Events pushed after their commit. When they follow the cursor (nothing missed)
        and the person was re-checked lately, they are delivered from the message itself;
        otherwise the pump reads the log, which also re-checks the person."""
        if self.pump is None or message.get("sequence", 0) <= self.cursor:
            return
        # The quiet-spell tick re-checks every recheck interval; a push is delivered from the
        # message while that re-check is current (a tick may be under way: twice the interval).
        due = time.monotonic() - self.checked_at > 2 * self._recheck_seconds()
        if due or self.sending.locked() or message.get("first") != self.cursor + 1:
            self.wake.set()
            return
        async with self.sending:
            for item in message["events"]:
                text = rendered(item, viewer=self.viewer, tenant_slug=self.tenant_slug, run_id=self.run_id)
                if text is not None:
                    await self.send(text_data=text)
            self.cursor = message["sequence"]
            self.pushed += 1

    async def harbor_tick(self, message: dict) -> None:
        """A quiet spell or a failing layer: read anyway (and re-check the membership)."""
        if self.pump is not None:
            self.wake.set()

    async def harbor_close(self, message: dict) -> None:
        """Logout (this login session) closes at once; a membership change is re-checked."""
        if message.get("session") is not None:
            if message["session"] == self.session:
                await self.close(code=CLOSE_UNAUTHENTICATED)
        elif self.pump is not None:
            self.checked_at = 0.0  # nothing is delivered from a push before the re-check
            self.wake.set()

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
            async with self.sending:
                while True:
                    close, envelopes, self.cursor, viewer = await database_sync_to_async(_read)(
                        self.user_id, self.tenant_id, self.session_key, self.run_id, self.cursor
                    )
                    if close is not None:
                        await self.close(code=close)
                        return
                    self.viewer, self.checked_at, self.pushed = viewer, time.monotonic(), 0
                    for envelope in envelopes:
                        await self.send_json(envelope)
                    if len(envelopes) < streams.BATCH:
                        break
