"""GET /v1/events: the event stream as Server-Sent Events (PROTOCOL §5).

An async view, served on Daphne's event loop. While a stream is idle it holds no worker
thread and no database connection: it awaits its channel-layer inbox, and each database
read runs on a pool thread that closes its connection before returning.

Ordering and exactly-once delivery come from the durable log, not from the live push: the
push (`{"type": "harbor.event", "sequence": n, ...}` on the tenant group) only says "the
log grew"; the stream then reads every visible event after its cursor, by sequence.
Sequences are allocated under the tenant row's lock and committed in that order, so a read
by `sequence > cursor` never skips a late commit. A push lost on a full inbox is made up
by the read that follows every keepalive.
"""

import asyncio
import json
import logging
from dataclasses import dataclass

from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from django.conf import settings
from django.db import connections
from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.views.decorators.csrf import csrf_exempt

from approvals.selectors import token_visibility

from . import events, selectors
from .auth import caller_from_headers
from .errors import HTTP_STATUS, HarborError, IdentityScopeRequired, InvalidRequest, NotFound
from .identity import Caller
from .models import Tenant

log = logging.getLogger("harbor.sse")

RETRY_MS = 3000
BATCH = 200
MAX_TYPES = 50


@dataclass(frozen=True)
class Plan:
    caller: Caller
    tenant_id: int
    run_id: str | None
    types: frozenset[str] | None
    tenant_wide: bool
    cursor: int | None


def _in_pool_thread(fn):
    """Run a blocking DB read off the event loop, on a pool thread (never a dedicated one),
    and close that thread's connections afterwards: an idle stream holds none."""

    def call(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        finally:
            for conn in connections.all(initialized_only=True):
                conn.close()

    return sync_to_async(call, thread_sensitive=False)


def _header_list(value: str) -> frozenset[str] | None:
    names = frozenset(part.strip() for part in value.split(",") if part.strip())
    if len(names) > MAX_TYPES or any(len(n) > 64 for n in names):
        raise InvalidRequest(f"X-Harbor-Event-Type names at most {MAX_TYPES} types of up to 64 characters")
    return names or None


def _open(meta: dict, query: dict) -> Plan:
    """Authenticate and validate before the stream starts, so failures are plain JSON errors."""
    caller = caller_from_headers(meta)
    tenant_wide = query.get("admin", "") in ("1", "true")
    if tenant_wide and not caller.is_admin:
        raise IdentityScopeRequired("?admin=1 streams the whole tenant and needs the admin scope")
    run_id = meta.get("HTTP_X_HARBOR_RUN") or None
    if run_id is not None and selectors.run_visible(caller=caller, run_id=run_id) is None:
        raise NotFound("no such run")
    types = _header_list(meta.get("HTTP_X_HARBOR_EVENT_TYPE", ""))
    raw_cursor = (meta.get("HTTP_LAST_EVENT_ID") or "").strip()
    cursor = None
    if raw_cursor:
        if not raw_cursor.isdigit() or len(raw_cursor) > 18:
            raise InvalidRequest("Last-Event-ID must be an event sequence (a non-negative integer)")
        cursor = int(raw_cursor)
    return Plan(caller=caller, tenant_id=caller.tenant.pk, run_id=run_id, types=types, tenant_wide=tenant_wide,
                cursor=cursor)


def _head(tenant_id: int) -> int:
    return Tenant.objects.filter(pk=tenant_id).values_list("event_sequence", flat=True).first() or 0


def _read(plan: Plan, cursor: int) -> tuple[list[tuple[int, str, str]], int]:
    """The next frames after `cursor`, and the new cursor. When the batch is not full, every
    event up to the tenant's head at the start of the read has been seen (committed events
    only: the head and its events commit together), so the cursor moves past invisible ones."""
    head = _head(plan.tenant_id)
    batch = selectors.events_after(
        caller=plan.caller, after=cursor, run_id=plan.run_id, types=plan.types,
        tenant_wide=plan.tenant_wide, limit=BATCH,
    )
    may_see_token = token_visibility(caller=plan.caller, pause_ids=[e.payload.get("_pause") for e in batch])
    frames = []
    for event in batch:
        envelope = events.envelope(event, tenant_slug=plan.caller.tenant.slug,
                                   with_tokens=may_see_token(event.payload.get("_pause")))
        data = json.dumps(envelope, separators=(",", ":"), ensure_ascii=False)
        frames.append((event.sequence, event.type, f"event: {event.type}\nid: {event.sequence}\ndata: {data}\n\n"))
    new_cursor = frames[-1][0] if frames else cursor
    if len(batch) < BATCH:
        new_cursor = max(new_cursor, head)
    return frames, new_cursor


open_plan = _in_pool_thread(_open)
read_frames = _in_pool_thread(_read)
read_head = _in_pool_thread(_head)


def _error(error: HarborError) -> JsonResponse:
    code = error.code if error.code in HTTP_STATUS else "runtime_error"
    response = JsonResponse({"code": code, "message": error.message}, status=HTTP_STATUS[code])
    if HTTP_STATUS[code] == 401:
        response["WWW-Authenticate"] = 'Bearer realm="harbor"'
    return response


async def _frames(plan: Plan, layer, channel: str, group: str, cursor: int):
    keepalive = float(getattr(settings, "HARBOR_SSE_KEEPALIVE_SECONDS", 15))
    try:
        yield f"retry: {RETRY_MS}\n\n"
        while True:
            frames, cursor_after = await read_frames(plan, cursor)
            for _, _, frame in frames:
                yield frame
            cursor = cursor_after
            if len(frames) == BATCH:
                continue  # more retained events to replay before waiting
            try:
                while True:  # wait for a push past the cursor; older ones were already read
                    message = await asyncio.wait_for(layer.receive(channel), timeout=keepalive)
                    if message.get("sequence", 0) > cursor and (plan.run_id is None or message.get("run") == plan.run_id):
                        break
            except asyncio.TimeoutError:
                yield ": keepalive\n\n"
                await layer.group_add(group, channel)  # refresh the membership before it expires
    finally:
        try:
            await layer.group_discard(group, channel)
        except Exception:  # the client is gone either way
            log.debug("group_discard failed for %s", channel, exc_info=True)


@csrf_exempt
async def events_stream(request: HttpRequest) -> HttpResponse:
    if request.method != "GET":
        response = JsonResponse({"code": "invalid_request", "message": f"{request.method} is not allowed; use GET"},
                                status=405)
        response["Allow"] = "GET"
        return response
    try:
        plan = await open_plan(dict(request.META), dict(request.GET.items()))
    except HarborError as error:
        return _error(error)
    except Exception:
        log.exception("opening an event stream failed")
        return JsonResponse({"code": "runtime_error", "message": "internal error"}, status=500)

    layer = get_channel_layer()
    channel = await layer.new_channel("sse.")
    # Join the tenant group (the run's stream is a filter over it) before taking the cursor,
    # so nothing committed in between is missed.
    group = events.tenant_group(plan.tenant_id)
    await layer.group_add(group, channel)
    cursor = plan.cursor if plan.cursor is not None else await read_head(plan.tenant_id)
    response = StreamingHttpResponse(_frames(plan, layer, channel, group, cursor), content_type="text/event-stream")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"  # a buffering proxy would hold frames back
    return response
