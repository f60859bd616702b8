"""The websocket event stream of PROTOCOL §5 (extension) for the browser pages.

`/ws/events/` streams the tenant's events the signed-in person may see (the inbox and the
runs list); `/ws/events/?run=<id>` narrows to one run (the run page). `?after=<sequence>`
first replays the durable log after that cursor, so a page that reconnects misses nothing.

Groups are named from server-side ids only; the client's query string picks a run, which
is permission-checked before its group is joined. A group message carries only an event's
pk: each delivery reads the event back from the log and checks again that the person may
see its run, so a push never leaks across tenants or past a revoked membership. Nothing
here writes: steering goes through the services, like every other client."""

import asyncio
import logging
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.conf import settings

from approvals.selectors import token_visibility

from . import events, selectors
from .identity import Caller
from .models import Membership
from .views import web_session_for_key

log = logging.getLogger("harbor.ws")

# Close codes (4000-4999 are the application's): the page shows why it stopped listening.
CLOSE_UNAUTHENTICATED = 4401
CLOSE_FORBIDDEN = 4403
CLOSE_NOT_FOUND = 4404
CLOSE_INVALID = 4400


def _caller_for(user_id: int, tenant_id: int, session: str = "websocket") -> Caller | None:
    """The person as a Caller of the tenant they connected in, or None once revoked."""
    membership = Membership.objects.select_related("tenant", "user").filter(user_id=user_id, tenant_id=tenant_id).first()
    if membership is None or not membership.user.is_active:
        return None
    return Caller(tenant=membership.tenant, user=membership.user, session=session)


def _connect_plan(user, session: str, run_id: str | None, after: int | None) -> dict:
    membership = selectors.membership_for_user(user=user)
    if membership is None:
        return {"close": CLOSE_FORBIDDEN}
    caller = _caller_for(user.pk, membership.tenant_id, session)
    if caller is None:
        return {"close": CLOSE_FORBIDDEN}
    run = None
    if run_id is not None:
        run = selectors.run_visible(caller=caller, run_id=run_id)
        if run is None:  # missing and foreign runs look alike
            return {"close": CLOSE_NOT_FOUND}
    group = events.run_group(run.pk) if run else events.tenant_group(caller.tenant.pk)
    replay = []
    if after is not None:
        replay = [_envelope(caller, event) for event in selectors.events_replay(caller=caller, after=after, run=run)]
    return {"tenant": caller.tenant.pk, "group": group, "replay": replay}


def _envelope(caller: Caller, event) -> dict:
    # A resume token goes only where the decision rule would accept it (the pausing user
    # and session, or the permission to decide), as on the SSE stream.
    may_see_token = token_visibility(caller=caller, pause_ids=[event.payload.get("_pause")])
    return events.envelope(
        event, tenant_slug=caller.tenant.slug, with_tokens=may_see_token(event.payload.get("_pause"))
    )


def _delivery(user_id: int, tenant_id: int, session: str, event_pk: int) -> dict:
    caller = _caller_for(user_id, tenant_id, session)
    if caller is None:
        return {"revoked": True}
    event = selectors.event_for_delivery(caller=caller, event_pk=event_pk)
    return {"envelope": _envelope(caller, event) if event is not None else None}


def _still_member(user_id: int, tenant_id: int) -> bool:
    return _caller_for(user_id, tenant_id) is not None


class EventsConsumer(AsyncJsonWebsocketConsumer):
    group: str | None = None
    cursor: int = 0
    watchdog: asyncio.Task | None = None

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
        if (run_id is not None and not (0 < len(run_id) <= 26 and run_id.isalnum())) or (after is not None and after < 0):
            await self.close(code=CLOSE_INVALID)
            return
        # The page's identity triple: the same session id the page's forms act with.
        session_key = getattr(self.scope.get("session"), "session_key", None) or ""
        self.session = web_session_for_key(session_key) if session_key else "websocket"
        plan = await database_sync_to_async(_connect_plan)(user, self.session, run_id, after)
        if "close" in plan:
            await self.close(code=plan["close"])
            return
        self.user_id, self.tenant_id, self.group = user.pk, plan["tenant"], plan["group"]
        # Join before replaying: anything committed meanwhile arrives live, and the cursor
        # below drops what the replay already sent.
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()
        self.cursor = after or 0
        for envelope in plan["replay"]:
            await self.send_json(envelope)
            self.cursor = max(self.cursor, envelope["sequence"])
        self.watchdog = asyncio.create_task(self._watch_membership())

    async def disconnect(self, code) -> None:
        if self.watchdog is not None:
            self.watchdog.cancel()
        if self.group is not None:
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def receive_json(self, content, **kwargs) -> None:
        """Clients only listen; anything they send is ignored."""

    async def harbor_event(self, message: dict) -> None:
        if message.get("sequence", 0) <= self.cursor and self.cursor:
            return  # already sent by the replay
        result = await database_sync_to_async(_delivery)(self.user_id, self.tenant_id, self.session, message["event"])
        if result.get("revoked"):
            await self.close(code=CLOSE_FORBIDDEN)
            return
        if result["envelope"] is not None:
            await self.send_json(result["envelope"])

    async def _watch_membership(self) -> None:
        """A revoked membership closes a quiet socket too, not only one that receives."""
        interval = getattr(settings, "HARBOR_WS_RECHECK_SECONDS", 30)
        try:
            while True:
                await asyncio.sleep(interval)
                if not await database_sync_to_async(_still_member)(self.user_id, self.tenant_id):
                    await self.close(code=CLOSE_FORBIDDEN)
                    return
        except asyncio.CancelledError:
            pass
