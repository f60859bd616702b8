"""The durable event log: event types and the writer.

An event is inserted in the transaction of the change it describes, when it is emitted, so it
stands or falls with that change (a savepoint rolled back takes its events along). Its
sequence is given as the service transaction ends (`atomic`): the tenant's cursor is the last
lock a transaction takes and is held only for the commit, and sequences are strictly
increasing in commit order, without gaps. The live push follows the commit."""

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from functools import partial
from typing import TYPE_CHECKING

from django.db import transaction
from django.utils import timezone

from runs.domain import push, sql
from runs.domain.envelopes import SEALED, SIGN_IN_KEYS, TOKEN_KEYS, capabilities, envelope
from runs.domain.event_types import EventPayload
from runs.models import Event, Run

if TYPE_CHECKING:  # approvals.models imports runs.models; the annotation needs no import at runtime
    from approvals.models import Pause

__all__ = [
    "SEALED",
    "SIGN_IN_KEYS",
    "TOKEN_KEYS",
    "atomic",
    "capabilities",
    "emit",
    "envelope",
]

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


class _Unit:
    """The events written by one service transaction, numbered as it ends."""

    def __init__(self) -> None:
        self.written: list[push.Pushed] = []


_unit: ContextVar[_Unit | None] = ContextVar("harbor_unit_of_work", default=None)


@contextmanager
def atomic() -> Iterator[None]:
    """A service's transaction (durable: never inside another). Its events are numbered from
    their tenants' cursors as it ends, and pushed to the live streams once it commits."""
    with transaction.atomic(durable=True):
        unit = _Unit()
        token = _unit.set(unit)
        try:
            yield
            _number(unit.written)
        finally:
            _unit.reset(token)


def emit(*, run: Run, type: str, payload: EventPayload, pause: "Pause | None" = None) -> None:
    """Append an event, in the transaction of the change it describes (the run's row lock
    held). Inside `atomic()` it is numbered when the transaction ends; in any other
    transaction, at once (which takes the tenant's cursor now)."""
    assert transaction.get_connection().in_atomic_block, "events are written in the transaction of their change"
    held = TOKEN_KEYS + SIGN_IN_KEYS if pause is not None else TOKEN_KEYS
    stored: dict[str, object] = {k: v for k, v in payload.items() if k not in held}
    if pause is not None:
        stored["_pause"] = pause.pk
        stored["_token_keys"] = [k for k in held if k in payload]
    event = Event(
        tenant=run.tenant,
        run=run,
        type=type,
        user=run.owner.username,
        session=run.session,
        payload=stored,
        occurred_at=timezone.now(),
    )
    event.pk = sql.insert_event(event)
    unit = _unit.get()
    if unit is not None:
        unit.written.append((event, pause))
    else:
        _number([(event, pause)])


def _number(written: list[push.Pushed]) -> None:
    """Give the events their sequences, tenant by tenant in one order (no deadlock between
    tenants), and push them once the transaction commits. Events a rolled-back savepoint took
    with it are no longer there, and get no number."""
    by_tenant: dict[int, list[push.Pushed]] = {}
    for event, pause in _latest(written):
        by_tenant.setdefault(event.tenant_id, []).append((event, pause))
    for tenant_id in sorted(by_tenant):
        events = by_tenant[tenant_id]
        numbered = sql.number_events(tenant_id, [event.pk for event, _ in events])
        kept = [(event, pause) for event, pause in events if event.pk in numbered]
        for event, _ in kept:
            event.sequence = numbered[event.pk]
        if kept:
            transaction.on_commit(partial(push.push, tenant_id, kept))


def _latest(written: list[push.Pushed]) -> list[push.Pushed]:
    """Of the events written under one id, the last (in the order written): SQLite gives
    the ids of rows a rolled-back savepoint took to the next rows inserted, so an earlier
    event under the same id is one the savepoint took."""
    latest: dict[int, push.Pushed] = {}
    for event, pause in reversed(written):
        latest.setdefault(event.pk, (event, pause))
    return list(reversed(latest.values()))
