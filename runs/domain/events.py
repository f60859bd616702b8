"""The durable event log: event types, the writer, and the envelope of PROTOCOL §5.

Events are written in the same transaction as the change they describe, and pushed to the
channel layer only after it commits."""

import asyncio
import logging
import time
from typing import TYPE_CHECKING

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.utils import timezone

from runs.domain.event_types import EventPayload
from runs.models import Event, Run, Tenant

if TYPE_CHECKING:  # approvals.models imports runs.models; the annotation needs no import at runtime
    from approvals.models import Pause

log = logging.getLogger("harbor.events")

TASK_SPAWNED = "task.spawned"
TASK_STARTED = "task.started"
TASK_COMPLETED = "task.completed"
TASK_FAILED = "task.failed"
TASK_CANCELLED = "task.cancelled"
TASK_PRIORITISED = "task.prioritised"
TASK_REDIRECTED = "task.redirected"
PLANNER_DECISION = "planner.decision"
TOOL_INVOKED = "tool.invoked"
TOOL_COMPLETED = "tool.completed"
TOOL_FAILED = "tool.failed"
PAUSE_REQUESTED = "pause.requested"
PAUSE_RESUMED = "pause.resumed"
TOOL_APPROVAL_REQUESTED = "tool.approval_requested"
TOOL_AUTH_REQUIRED = "tool.auth_required"
TOOL_AUTH_COMPLETED = "tool.auth_completed"
A2A_INPUT_REQUIRED = "a2a.input_required"
A2A_AUTH_REQUIRED = "a2a.auth_required"
NOTIFICATION_PAUSE_REQUESTED = "notification.pause_requested"
TOOL_APPROVED = "tool.approved"
TOOL_REJECTED = "tool.rejected"
CONTROL_RECEIVED = "control.received"
CONTROL_APPLIED = "control.applied"
CONTROL_REJECTED = "control.rejected"
CONTEXT_INJECTED = "context.injected"
MESSAGE_RECEIVED = "message.received"

# Payload keys that carry a resume token. The log stores the pause reference instead and
# the envelope fills the token in from the sealed copy.
TOKEN_KEYS = ("Token", "PauseToken")
SEALED = "<sealed>"  # placeholder a caller puts under a token key when the pause is passed


def run_group(run_id: str) -> str:
    return f"run.{run_id}"


def tenant_group(tenant_id: int) -> str:
    return f"tenant.{tenant_id}"


def user_group(user_id: int) -> str:
    """Every live stream of one person, so a logout or a revoked membership closes them."""
    return f"user.{user_id}"


def emit(*, run: Run, type: str, payload: EventPayload, pause: "Pause | None" = None) -> Event:
    """Append an event. Must run inside the transaction of the change it describes, with
    the run's row lock held (lock order: run, pause, then the tenant cursor)."""
    conn = transaction.get_connection()
    assert conn.in_atomic_block, "events are written in the transaction of their change"
    sequence = _next_sequence(conn, run.tenant_id)
    stored: dict[str, object] = {k: v for k, v in payload.items() if k not in TOKEN_KEYS}
    if pause is not None:
        stored["_pause"] = pause.pk
        stored["_token_keys"] = [k for k in TOKEN_KEYS if k in payload]
    event = Event.objects.create(
        tenant_id=run.tenant_id,
        sequence=sequence,
        type=type,
        run=run,
        user=run.owner.username,
        session=run.session,
        payload=stored,
        occurred_at=timezone.now(),
    )
    transaction.on_commit(lambda: _push(event.pk, run.tenant_id, run.pk, event.sequence))
    return event


def _next_sequence(conn: BaseDatabaseWrapper, tenant_id: int) -> int:
    """Bump the tenant's event cursor. The UPDATE holds the cursor row until commit, so
    sequences are strictly increasing in commit order and a reader tailing by sequence
    never skips a late-committing event. An UPDATE of a non-key column takes a "no key"
    row lock: rows that merely point at the tenant (runs, pauses, events) still insert."""
    table = Tenant._meta.db_table
    with conn.cursor() as cursor:
        cursor.execute(
            f"UPDATE {table} SET event_sequence = event_sequence + 1 WHERE id = %s RETURNING event_sequence",
            [tenant_id],
        )
        return cursor.fetchone()[0]


def envelope(event: Event, *, tenant_slug: str | None = None, with_tokens: bool = True) -> dict:
    payload = dict(event.payload)
    pause_id = payload.pop("_pause", None)
    token_keys = payload.pop("_token_keys", [])
    if token_keys and pause_id:
        token = _pause_token(pause_id) if with_tokens else None
        for key in token_keys:
            payload[key] = token
    return {
        "type": event.type,
        "sequence": event.sequence,
        "occurred_at": event.occurred_at.isoformat().replace("+00:00", "Z"),
        "tenant": tenant_slug or event.tenant.slug,
        "user": event.user,
        "session": event.session,
        "run": event.run_id,
        "payload": payload,
    }


def _pause_token(pause_id: str) -> str | None:
    from approvals.domain.tokens import token_unseal
    from approvals.models import Pause

    sealed = Pause.objects.filter(pk=pause_id).values_list("token_sealed", flat=True).first()
    return token_unseal(sealed) if sealed else None


# The ASGI server's event loop, once known. The in-memory channel layer lives on that
# loop, so pushes from runtime threads are handed to it rather than run on a loop of
# their own.
_server_loop: asyncio.AbstractEventLoop | None = None


def bind_server_loop(loop: asyncio.AbstractEventLoop) -> None:
    global _server_loop
    _server_loop = loop


# A push waits at most this long for the channel layer, and after a failure pushes are
# skipped for a moment: a request never stalls on a Redis outage, and readers poll the log.
PUSH_TIMEOUT_SECONDS = 0.5
PUSH_BACKOFF_SECONDS = 2.0
_push_paused_until = 0.0


def _push(event_pk: int, tenant_id: int, run_id: str, sequence: int) -> None:
    """Tell live subscribers (SSE, websockets) that the log grew. Subscribers read the
    events back from the log, filtered to what their caller may see, so a lost push only
    delays them until their next read."""
    message = {"type": "harbor.event", "run": run_id, "sequence": sequence}
    _group_send([run_group(run_id), tenant_group(tenant_id)], message)


def close_streams(*, user_id: int, tenant_id: int | None = None, session_key: str | None = None) -> None:
    """Close a person's live streams (of one tenant, or one login session, when given)."""
    _group_send([user_group(user_id)], {"type": "harbor.close", "tenant": tenant_id, "session": session_key})


def _group_send(groups: list[str], message: dict) -> None:
    """Best effort, never raises and never blocks for long: it runs after commit, and a
    live push never undoes a committed change."""
    global _push_paused_until
    if time.monotonic() < _push_paused_until:
        return
    try:
        layer = get_channel_layer()
        if layer is None:
            return

        async def send() -> None:
            global _push_paused_until
            try:
                sends = [layer.group_send(group, message) for group in groups]
                await asyncio.wait_for(asyncio.gather(*sends), PUSH_TIMEOUT_SECONDS)
            except (Exception, asyncio.CancelledError):
                _push_paused_until = time.monotonic() + PUSH_BACKOFF_SECONDS
                log.warning("live push to %s failed; readers catch up from the log", groups, exc_info=True)

        loop = _server_loop
        if loop is not None and loop.is_running():
            asyncio.run_coroutine_threadsafe(send(), loop)
        else:
            async_to_sync(send)()
    except (Exception, asyncio.CancelledError):
        log.warning("live push to %s failed", groups, exc_info=True)
