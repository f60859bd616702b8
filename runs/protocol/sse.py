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
import logging
import time
import weakref
from collections.abc import AsyncGenerator

from channels.layers import get_channel_layer
from django.conf import settings
from django.http import HttpRequest, JsonResponse, StreamingHttpResponse
from django.http.response import HttpResponseBase
from django.views.decorators.csrf import csrf_exempt

from runs.domain import push
from runs.kernel.errors import HarborError
from runs.protocol.errors import harbor_error_response, method_not_allowed
from runs.protocol.stream_reads import Plan, frame_event, open_plan, read_frames, read_head
from runs.protocol.stream_slots import RETRY_MS, StreamSlot, take_stream_slot
from runs.streams.hub import listening_on, poll_seconds
from runs.streams.reads import BATCH, push_shown, pushed_envelope, starting_cursor
from runs.streams.tail import Tail

log = logging.getLogger("harbor.sse")


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


async def _frames(plan: Plan, tail: Tail, cursor: int, slot: StreamSlot | None = None) -> AsyncGenerator[str, None]:
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
                            yield frame_event(pushed_envelope(item, tenant_slug=plan.tenant_slug, with_token=False))
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
        slot = take_stream_slot(plan.caller.user.pk)
    except HarborError as error:
        return _error(error)
    try:
        layer = get_channel_layer()
        tail = Tail(listening_on(layer), await layer.new_channel("sse."))
        # Join the tenant group (the run's stream is a filter over it) before taking the
        # cursor, so nothing committed in between is missed.
        await tail.join(push.tenant_group(plan.tenant_id), push.user_group(plan.caller.user.pk))
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
