"""GET /v1/events: the event stream as Server-Sent Events (PROTOCOL §5).

An async view, served on Daphne's event loop. While a stream is idle it holds no worker
thread and no database connection: it awaits its channel-layer inbox, and each database
read runs on a pool thread that hands its connection back (to PostgreSQL's pool) before
returning.

Ordering and exactly-once delivery come from the durable log (`streams.read_after`) and its
sequences. A push that follows the stream's cursor is delivered from the message itself (the
events and the inputs of the visibility rule ride in it), so a busy tenant costs its streams
no read per commit; a gap, a quiet spell or a failing layer reads the log, and while the
layer fails the stream polls it. Every read re-checks the caller, at least once a keepalive
interval and at once on a membership change; a resume token is sent only by a read, so it is
re-checked at send time. A revoked membership or a lost admin role ends the stream, and so
does the token's expiry, so a stream never outlives the right to read it.
"""

import asyncio
import json
import logging
import time
import weakref
from collections import Counter
from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import jwt
from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from django.conf import settings
from django.db import close_old_connections
from django.http import HttpRequest, JsonResponse, StreamingHttpResponse
from django.http.response import HttpResponseBase
from django.views.decorators.csrf import csrf_exempt

from runs.domain import events, selectors
from runs.domain.connection_loss import once_more_if_lost
from runs.domain.event_types import Envelope
from runs.identity.callers import Caller, caller_resolve
from runs.identity.visibility import Viewer, viewer_of
from runs.kernel.errors import AuthRejected, HarborError, IdentityScopeRequired, InvalidRequest, RateLimited
from runs.protocol.auth import bearer_token, caller_from_headers
from runs.protocol.errors import harbor_error_response, method_not_allowed
from runs.streams.tail import (
    BATCH,
    CURSOR_DIGITS,
    Tail,
    event_types,
    is_cursor,
    listening_on,
    poll_seconds,
    push_shown,
    pushed_envelope,
    read_after,
    starting_cursor,
)

T = TypeVar("T")
log = logging.getLogger("harbor.sse")

RETRY_MS = 3000

# Streams each person holds open on this process (its one event loop: no lock). Each costs
# reads and a share of every push: the streams one person may open are bounded, as their
# websockets are (HARBOR_SSE_MAX_PER_USER).
_open_by_user: Counter[int] = Counter()


class _Slot:
    """One person's place among their open streams, given back once, whichever way the
    stream ends (finished, the client gone, or never started and collected)."""

    def __init__(self, user_id: int) -> None:
        self.user_id: int | None = user_id
        _open_by_user[user_id] += 1

    def release(self) -> None:
        if self.user_id is not None:
            _open_by_user[self.user_id] -= 1
            if not _open_by_user[self.user_id]:
                del _open_by_user[self.user_id]
            self.user_id = None


def _take_slot(user_id: int) -> _Slot:
    limit = int(getattr(settings, "HARBOR_SSE_MAX_PER_USER", 50))
    if _open_by_user[user_id] >= limit:
        refused = RateLimited(f"this person already holds {limit} open event streams; close one or retry later")
        refused.retry_after = RETRY_MS // 1000  # type: ignore[attr-defined]  # read by harbor_error_response
        raise refused
    return _Slot(user_id)


@dataclass(frozen=True)
class Plan:
    caller: Caller
    tenant_id: int
    tenant_slug: str
    run_id: str | None
    types: frozenset[str] | None
    tenant_wide: bool
    cursor: int | None
    expires_at: float  # the token's `exp`: the stream ends then


def _in_pool_thread(fn: Callable[..., T]) -> Callable[..., Awaitable[T]]:
    """Run a blocking DB read off the event loop, on a pool thread (never a dedicated one),
    again on a new connection if its own was lost (runs.domain.connection_loss), and hand
    that thread's connections back afterwards (PostgreSQL's to the pool): an idle stream
    holds none. The pool's few threads keep their SQLite connections for
    CONN_MAX_AGE, as requests' threads do: opening one costs more than a read."""

    def call(*args: Any, **kwargs: Any) -> T:
        try:
            return once_more_if_lost(fn, *args, **kwargs)
        finally:
            close_old_connections()

    return sync_to_async(call, thread_sensitive=False)


def _open(meta: dict, query: dict) -> Plan:
    """Authenticate and validate before the stream starts, so failures are plain JSON errors."""
    caller = caller_from_headers(meta)
    tenant_wide = query.get("admin", "") in ("1", "true")
    if tenant_wide and not caller.is_admin:
        raise IdentityScopeRequired("?admin=1 streams the whole tenant and needs the admin scope")
    # A run the caller cannot see yields an empty stream, as in Harbor: the read filters it.
    run_id = meta.get("HTTP_X_HARBOR_RUN") or None
    try:
        types = event_types(meta.get("HTTP_X_HARBOR_EVENT_TYPE", ""))
    except InvalidRequest as error:
        raise InvalidRequest(f"X-Harbor-Event-Type: {error}") from None
    raw_cursor = (meta.get("HTTP_LAST_EVENT_ID") or "").strip()
    cursor = None
    if raw_cursor:
        if not is_cursor(raw_cursor):
            raise InvalidRequest(
                f"Last-Event-ID must be an event sequence (a non-negative integer of up to {CURSOR_DIGITS} digits)"
            )
        cursor = int(raw_cursor)
    # Verified just now by caller_from_headers: only its expiry is read here.
    token = bearer_token(meta.get("HTTP_AUTHORIZATION", "")) or ""
    claims = jwt.decode(token, options={"verify_signature": False})
    if claims["exp"] <= time.time():  # within the clock leeway: a stream would end at once
        raise AuthRejected("the token has expired")
    return Plan(
        caller=caller,
        tenant_id=caller.tenant.pk,
        tenant_slug=caller.tenant.slug,
        run_id=run_id,
        types=types,
        tenant_wide=tenant_wide,
        cursor=cursor,
        expires_at=float(claims["exp"]),
    )


def _current_caller(plan: Plan) -> Caller | None:
    """The stream's caller as of now, or None once it may no longer read this stream."""
    opened = plan.caller
    try:
        caller = caller_resolve(
            tenant=opened.tenant.slug,
            user=opened.user.username,
            session=opened.session,
            scopes=opened.scopes,
            address=opened.address,
            provision=False,
        )
    except HarborError:
        return None
    return None if plan.tenant_wide and not caller.is_admin else caller


def _frame(envelope: Envelope) -> str:
    data = json.dumps(envelope, separators=(",", ":"), ensure_ascii=False)
    return f"event: {envelope['type']}\nid: {envelope['sequence']}\ndata: {data}\n\n"


def _read(plan: Plan, cursor: int) -> tuple[list[str], int, Viewer] | None:
    """The next frames after `cursor`, the new cursor, and the caller's Viewer as of now (what
    the pushes until the next read are delivered by); None once the caller was revoked."""
    caller = _current_caller(plan)
    if caller is None:
        return None
    envelopes, cursor = read_after(
        caller=caller, cursor=cursor, run_id=plan.run_id, types=plan.types, tenant_wide=plan.tenant_wide
    )
    return [_frame(envelope) for envelope in envelopes], cursor, viewer_of(caller, tenant_wide=plan.tenant_wide)


open_plan = _in_pool_thread(_open)
read_frames = _in_pool_thread(_read)
read_head = _in_pool_thread(lambda tenant_id: selectors.events_head(tenant_id=tenant_id))


class _SharedHeads:
    """While the channel layer is down, a process's streams of one tenant share one read of
    the log's head per half poll interval, and only a stream behind it reads the log: an
    outage costs a quiet tenant one small query, not a full read per stream each poll."""

    def __init__(self) -> None:
        self._reads: dict[int, tuple[float, asyncio.Future[int]]] = {}

    async def head(self, tenant_id: int) -> int:
        taken = self._reads.get(tenant_id)
        now = time.monotonic()
        if (
            taken is None
            or now - taken[0] >= poll_seconds() / 2
            or taken[1].get_loop() is not asyncio.get_running_loop()
        ):
            taken = self._reads[tenant_id] = (now, asyncio.ensure_future(read_head(tenant_id)))
        return await asyncio.shield(taken[1])  # a stream that goes away does not cancel the others' read


_heads = _SharedHeads()


def _error(error: HarborError) -> JsonResponse:
    """The same body, status and headers as every other /v1 route (runs.protocol.errors)."""
    rendered = harbor_error_response(error)
    response = JsonResponse(rendered.data, status=rendered.status_code)
    for header, value in rendered.headers.items():
        if header.lower() != "content-type":  # an unrendered Response's is Django's default, text/html
            response[header] = value
    return response


async def _frames(plan: Plan, tail: Tail, cursor: int, slot: _Slot | None = None) -> AsyncGenerator[str, None]:
    """Read the log after the cursor (re-checking the caller), then wait. A push that follows
    the cursor is delivered from the message itself, under the Viewer of the last read, for
    a keepalive interval after that read, unless it carries a resume token for this caller;
    anything else (a token, a gap, a membership change, a quiet spell, an outage) reads the
    log again, re-checking the caller."""
    keepalive = float(getattr(settings, "HARBOR_SSE_KEEPALIVE_SECONDS", 15))
    try:
        yield f"retry: {RETRY_MS}\n\n"
        next_keepalive = time.monotonic() + keepalive
        while time.time() < plan.expires_at:
            result = await read_frames(plan, cursor)
            if result is None:
                return  # revoked: the client's reconnect is refused
            frames, cursor, viewer = result
            checked_at = time.monotonic()
            for frame in frames:
                yield frame
            if len(frames) == BATCH:
                continue  # more retained events to replay before waiting
            while time.time() < plan.expires_at:  # wait for a push past the cursor
                wait = min(next_keepalive - time.monotonic(), plan.expires_at - time.time())
                message = await tail.next(max(wait, 0))
                if message is None:  # quiet, or the layer is failing: read the log anyway
                    if time.monotonic() >= next_keepalive:
                        yield ": keepalive\n\n"
                        next_keepalive = time.monotonic() + keepalive
                    elif not tail.up and await _heads.head(plan.tenant_id) <= cursor:
                        continue  # the layer is down and the log has not grown: nothing to read
                    break
                if message.get("type") == "harbor.close":
                    break  # a membership changed: the read re-checks the caller
                if (
                    message.get("type") == "harbor.events"
                    and message.get("first") == cursor + 1
                    and time.monotonic() - checked_at < keepalive
                ):
                    shown = [
                        (item, push_shown(item, viewer=viewer, run_id=plan.run_id, types=plan.types))
                        for item in message["events"]
                    ]
                    if any(with_token for _, with_token in shown):
                        break  # a resume token is sent only after a re-check at send time: read
                    for item, with_token in shown:
                        if with_token is not None:
                            yield _frame(pushed_envelope(item, tenant_slug=plan.tenant_slug, with_token=False))
                    cursor = message["sequence"]
                    continue
                if message.get("sequence", 0) > cursor and (
                    plan.run_id is None or plan.run_id in (message.get("run"), *message.get("runs", ()))
                ):
                    break
    finally:
        if slot is not None:
            slot.release()
        await tail.leave()


@csrf_exempt
async def events_stream(request: HttpRequest) -> HttpResponseBase:
    if request.method != "GET":
        return method_not_allowed(request.method)
    try:
        plan = await open_plan(dict(request.META), dict(request.GET.items()))
    except HarborError as error:
        return _error(error)
    except Exception:
        log.exception("opening an event stream failed")
        return JsonResponse({"code": "runtime_error", "message": "internal error"}, status=500)

    try:
        slot = _take_slot(plan.caller.user.pk)
    except HarborError as error:
        return _error(error)
    try:
        layer = get_channel_layer()
        tail = Tail(listening_on(layer), await layer.new_channel("sse."))
        # Join the tenant group (the run's stream is a filter over it) before taking the
        # cursor, so nothing committed in between is missed.
        await tail.join(events.tenant_group(plan.tenant_id), events.user_group(plan.caller.user.pk))
        cursor = starting_cursor(plan.cursor, await read_head(plan.tenant_id))
    except BaseException:
        slot.release()
        raise
    frames = _frames(plan, tail, cursor, slot)
    weakref.finalize(frames, slot.release)  # a stream never iterated still gives its place back
    stream = StreamingHttpResponse(frames, content_type="text/event-stream")
    stream["Cache-Control"] = "no-cache"
    stream["X-Accel-Buffering"] = "no"  # a buffering proxy would hold frames back
    return stream
