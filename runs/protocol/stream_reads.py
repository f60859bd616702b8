"""What an SSE stream reads, on pool threads: its plan (the caller, the cursor, the narrowing,
checked before the stream starts), and the frames after its cursor, the caller re-checked
at each read."""

import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import jwt
from asgiref.sync import sync_to_async
from django.db import close_old_connections

from runs.domain import selectors
from runs.domain.connection_loss import retry_once_if_lost
from runs.domain.event_types import Envelope
from runs.identity.callers import Caller, caller_resolve
from runs.identity.visibility import Viewer, viewer_of
from runs.kernel.errors import AuthRejected, HarborError, IdentityScopeRequired, InvalidRequest
from runs.protocol.auth import bearer_token, caller_from_headers
from runs.streams.reads import CURSOR_DIGITS, event_types, is_cursor, read_after

T = TypeVar("T")


@dataclass(frozen=True)
class Plan:
    """A stream as its request asked for it, checked before the stream starts."""

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
            return retry_once_if_lost(fn, *args, **kwargs)
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


def frame_event(envelope: Envelope) -> str:
    """One event as an SSE frame: its type, its sequence as the id (the client's resume
    cursor), the envelope as data."""
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
    return [frame_event(envelope) for envelope in envelopes], cursor, viewer_of(caller, tenant_wide=plan.tenant_wide)


open_plan = _in_pool_thread(_open)
read_frames = _in_pool_thread(_read)
read_head = _in_pool_thread(lambda tenant_id: selectors.events_head(tenant_id=tenant_id))
