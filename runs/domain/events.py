"""The durable event log: event types, the writer, and the envelope of PROTOCOL §5.

Events are written in the same transaction as the change they describe, and pushed to the
channel layer only after it commits."""

import asyncio
import atexit
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from typing import TYPE_CHECKING, Any, cast

from asgiref.sync import async_to_sync
from channels.layers import InMemoryChannelLayer, get_channel_layer
from django.db import IntegrityError, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import Model
from django.utils import timezone

from approvals.domain import tokens
from runs.domain import pubsub
from runs.domain.event_types import Envelope, EventPayload
from runs.domain.rows import Rows, Statement, alone, prepared_cursor
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
# Keys that carry a sign-in's one-time state (tool.auth_required, a2a.auth_required): whoever
# holds it can complete the sign-in, so they reach only those the token reaches, filled in
# from the pause's payload, where they are sealed.
SIGN_IN_KEYS = tokens.SIGN_IN_KEYS
SEALED = "<sealed>"  # placeholder a caller puts under a token key when the pause is passed


def tenant_group(tenant_id: int) -> str:
    return f"tenant.{tenant_id}"


def user_group(user_id: int) -> str:
    """Every live stream of one person, so a logout or a revoked membership closes them."""
    return f"user.{user_id}"


class _Batch:
    """The events of one service transaction, written together just before it commits, with
    the rows left to its end (`at_end`)."""

    def __init__(self, conn: BaseDatabaseWrapper) -> None:
        self.conn, self.depth = conn, len(conn.atomic_blocks)
        self.thread = threading.get_ident()  # Django keeps a connection per thread: this one's is `conn`
        self.events: list[Written] = []
        self.rows: dict[int, tuple[Rows, Model]] = {}  # by identity: each row written once, as it ends
        self.guards: dict[int, tuple[tuple[str, list[object]], Exception]] = {}  # by the row's identity
        self.settles: list[Statement] = []
        self.asks: list[Ask] = []

    def holds(self) -> bool:
        """Whether a write made now on this thread belongs here: not inside a savepoint
        that could still roll back without the rest (such writes go at once)."""
        return len(self.conn.atomic_blocks) == self.depth

    def flush(self, *, last: bool = False) -> None:
        rows, self.rows = self.rows, {}
        guards, self.guards = self.guards, {}
        # A guarded row first: its UPDATE takes the row's lock before anything else is written.
        writes = [table.written_if(row, *guards[key]) for key, (table, row) in rows.items() if key in guards]
        writes += [
            statement
            for key, (table, row) in rows.items()
            if key not in guards and (statement := table.written(row)) is not None
        ]
        writes += self.settles
        self.settles = []
        events, self.events = self.events, []
        asks, self.asks = (self.asks, []) if last else ([], self.asks)
        _write(self.conn, events, writes, last=last, asks=asks)


_batch: ContextVar[_Batch | None] = ContextVar("harbor_event_batch", default=None)


@contextmanager
def atomic() -> Iterator[None]:
    """A service's transaction (durable) whose events are written once, at its end: one
    bump of the tenant cursor, one INSERT, and one live push after commit. The cursor is
    the last lock taken and is held only for the commit itself."""
    with transaction.atomic(durable=True):
        batch = _Batch(transaction.get_connection())
        token = _batch.set(batch)
        try:
            yield
            batch.flush(last=True)
        finally:
            _batch.reset(token)


def at_end(table: Rows, row: Model) -> None:
    """Write the row (insert it, or update what changed) at the end of this service
    transaction, with its events (at once outside `atomic()`): a later write of the same row
    in the transaction takes the change along, and this one finds nothing left to write."""
    conn, batch = _holding()
    if batch is not None:
        batch.rows.setdefault(id(row), (table, row))
    else:
        _send(conn, [statement] if (statement := table.written(row)) is not None else [])


def guard_at_end(table: Rows, row: Model, condition: tuple[str, list[object]], refused: Exception) -> None:
    """Write the row at the end of this service transaction (`at_end`), only while it still
    meets `condition` (SQL over its table's columns, and its parameters): a row read before
    the transaction, not locked in it. If it no longer does, `refused` is raised and nothing
    of the transaction lands (`Rows.written_if`)."""
    _, batch = _holding()
    assert batch is not None, "a guarded row is written at the end of a service transaction"
    batch.rows.setdefault(id(row), (table, row))
    batch.guards[id(row)] = (condition, refused)


def settle_at_end(statement: Statement) -> None:
    """Send a guarded write (`Rows.settling`) at the end of this service transaction, with
    its events (at once outside `atomic()`): the row lock its caller holds already decided
    it, and the guard stands behind that; if it writes no row, the transaction rolls back."""
    conn, batch = _holding()
    if batch is not None:
        batch.settles.append(statement)
    else:
        _send(conn, [statement])


@dataclass(frozen=True, slots=True)
class Ask:
    """A question asked in the statement that ends a service transaction (`ask_at_end`)."""

    sql: str  # a query of one value
    params: list[object]
    answer: Callable[[object], None]


def ask_at_end(sql: str, params: list[object], answer: Callable[[object], None]) -> None:
    """Ask `sql` (a query of one value, and its parameters) in a statement this service
    transaction sends anyway as it ends (with its events: on PostgreSQL its one statement,
    elsewhere its cursor's bump), where it sees what was committed before it. `answer` gets
    the value once that statement ran (the transaction may still roll back after it); a
    transaction that writes no event leaves it unasked, and `answer` is never called."""
    _, batch = _holding()
    if batch is not None:
        batch.asks.append(Ask(sql, params, answer))


def _current() -> tuple[BaseDatabaseWrapper, _Batch | None]:
    """The connection a write made now goes on, and this thread's service transaction, if
    any. That transaction has the connection at hand: looking it up through Django's
    handler, a few times per write, cost more than the check."""
    batch = _batch.get()
    if batch is not None and batch.thread == threading.get_ident():
        return batch.conn, batch
    return transaction.get_connection(), None


def _holding() -> tuple[BaseDatabaseWrapper, _Batch | None]:
    """`_current`, the transaction only where a write made now belongs to its end."""
    conn, batch = _current()
    return conn, batch if batch is not None and batch.holds() else None


@dataclass(slots=True)
class Written:
    """An event on its way into the log: the columns `_insert` writes (Event's, by attname)
    and what the live push needs besides. Lighter than an Event instance, whose
    construction cost more than the event's share of the INSERT."""

    run: Run
    type: str
    payload: dict[str, object]
    pause: "Pause | None"
    occurred_at: datetime
    sequence: int = 0

    @property
    def tenant(self) -> Tenant:
        return self.run.tenant

    @property
    def tenant_id(self) -> int:
        return self.run.tenant_id

    @property
    def run_id(self) -> str:
        return self.run.pk

    @property
    def user(self) -> str:
        return self.run.owner.username

    @property
    def session(self) -> str:
        return self.run.session


def emit(*, run: Run, type: str, payload: EventPayload, pause: "Pause | None" = None) -> None:
    """Append an event. Must run inside the transaction of the change it describes, with
    the run's row lock held (lock order: run, pause, then the tenant cursor). Inside
    `atomic()` the row is written when the transaction ends; elsewhere at once."""
    conn, batch = _current()
    assert conn.in_atomic_block, "events are written in the transaction of their change"
    held = TOKEN_KEYS + SIGN_IN_KEYS if pause is not None else TOKEN_KEYS
    stored: dict[str, object] = {k: v for k, v in payload.items() if k not in held}
    if pause is not None:
        stored["_pause"] = pause.pk
        stored["_token_keys"] = [k for k in held if k in payload]
    event = Written(run=run, type=type, payload=stored, pause=pause, occurred_at=timezone.now())
    if batch is not None and batch.holds():
        batch.events.append(event)
    else:
        if batch is not None:
            batch.flush()  # earlier events of the transaction keep their place in the order
        _write(conn, [event])


def _write(
    conn: BaseDatabaseWrapper,
    events: list[Written],
    rows: Sequence[Statement] = (),
    *,
    last: bool = False,
    asks: Sequence[Ask] = (),
) -> None:
    """Write the rows, number the events from their tenants' cursors, insert them, and nudge
    the live streams once after commit. On PostgreSQL it is one statement (the rows and the
    cursor bump ride in the events' INSERT as data-modifying CTEs), and when it is all its
    transaction sends (`last`, nothing before it), that statement is the transaction: no
    BEGIN or COMMIT of its own."""
    by_tenant: dict[int, list[Written]] = {}
    for event in events:
        by_tenant.setdefault(event.tenant_id, []).append(event)
    if conn.vendor == "postgresql" and len(by_tenant) == 1:
        (tenant_id,) = by_tenant
        # A guard's refusal undoes the statement (_insert), but which guard refused is not
        # told: a transaction goes alone only when one refusal answers for all (a snapshot's).
        guarded = [write for write in rows if write.refused]
        # Alone, a lost answer brings no transaction id back: its first event, which nothing
        # rewrites, says whether it landed.
        landed = partial(_logged, events[0])
        with alone(conn, landed) if last and (not guarded or guarded[0].covers) else nullcontext():
            _number(events, _insert(conn, events, bump_tenant=tenant_id, rows=rows, asks=asks))
    else:
        _send(conn, rows)
        if not events:
            return
        tenants = sorted(by_tenant)  # one order for everyone: no deadlock between tenants
        for tenant_id in tenants:
            numbered = by_tenant[tenant_id]
            _number(numbered, _next_sequence(conn, tenant_id, len(numbered), asks if tenant_id == tenants[-1] else ()))
        _insert(conn, events)

    def push_all() -> None:
        for tenant_id, written in by_tenant.items():
            _push(tenant_id, written)

    conn.on_commit(push_all)


def _logged(event: Written) -> bool:
    """Whether the event is in the log (the same run, type and time)."""
    return Event.objects.filter(run_id=event.run_id, type=event.type, occurred_at=event.occurred_at).exists()


def _send(conn: BaseDatabaseWrapper, statements: Sequence[Statement]) -> None:
    for statement in statements:
        with prepared_cursor(conn) as cursor:
            cursor.execute(statement.sql, statement.params)
            if statement.refused is not None and cursor.rowcount != 1:
                raise statement.refused
            statement.done(cursor.fetchone()[0] if statement.key else None)


def _number(events: list[Written], last: int) -> None:
    for offset, event in enumerate(events):
        event.sequence = last - len(events) + 1 + offset


# The columns `emit` fills with values the database takes as they are (ints and text); the
# payload and the time go through their fields' conversions.
_AS_GIVEN = frozenset({"tenant_id", "sequence", "type", "run_id", "user", "session"})


def _insert(
    conn: BaseDatabaseWrapper,
    events: list[Written],
    *,
    bump_tenant: int | None = None,
    rows: Sequence[Statement] = (),
    asks: Sequence[Ask] = (),
) -> int:
    """One multi-row INSERT, written out rather than built by bulk_create: every service
    transaction ends here, and the log needs no ids back. With `bump_tenant` (one tenant's
    events) the statement also bumps that tenant's cursor and numbers the rows from it,
    returning the cursor's new value (what _next_sequence does, in the same statement),
    writes `rows` first, each a CTE of its own, and answers `asks`."""
    fields = [field for field in Event._meta.concrete_fields if not field.primary_key]
    columns = ", ".join(conn.ops.quote_name(field.column) for field in fields)
    numbered = bump_tenant is not None
    slots = ["(SELECT event_sequence FROM bump) - %s" if numbered and f.attname == "sequence" else "%s" for f in fields]
    params: list[Any] = []
    for offset, event in enumerate(events):
        for field in fields:
            if numbered and field.attname == "sequence":
                params.append(len(events) - 1 - offset)
            else:
                value = getattr(event, field.attname)
                params.append(value if field.attname in _AS_GIVEN else field.get_db_prep_save(value, conn))
    values = f"({', '.join(slots)})"
    sql = f"INSERT INTO {Event._meta.db_table} ({columns}) VALUES {', '.join([values] * len(events))}"
    if numbered:
        # The cursor moves only once every guarded write wrote its row (each is made first,
        # its row locked before the cursor's): a refused one leaves the events unnumbered,
        # and their NOT NULL sequence undoes the whole statement.
        guards = "".join(
            f" AND (SELECT COUNT(*) FROM w{index}) = 1" for index, write in enumerate(rows) if write.refused
        )
        bump = f"UPDATE {Tenant._meta.db_table} SET event_sequence = event_sequence + %s WHERE id = %s{guards}"
        writes = "".join(
            f"w{index} AS ({write.sql}{' RETURNING 1' if write.refused else ''}), " for index, write in enumerate(rows)
        )
        # A key the database makes for a row comes back beside each sequence.
        keys = "".join(f", (SELECT {write.key} FROM w{index})" for index, write in enumerate(rows) if write.key)
        keys += "".join(f", ({ask.sql})" for ask in asks)
        # And the transaction's id, by which a COMMIT whose connection is lost is looked up
        # (runs.domain.connection_loss).
        sql = (
            f"WITH {writes}bump AS ({bump} RETURNING event_sequence) {sql}"
            f" RETURNING sequence{keys}, pg_current_xact_id()::text"
        )
        params = [
            *(param for write in rows for param in write.params),
            len(events),
            bump_tenant,
            *params,
            *(param for ask in asks for param in ask.params),
        ]
    with prepared_cursor(conn) as cursor:
        try:
            cursor.execute(sql, params)
        except IntegrityError as error:
            refused = next((write.refused for write in rows if write.refused), None)
            if refused is not None and getattr(getattr(error.__cause__, "diag", None), "column_name", "") == "sequence":
                raise refused from None  # before any row is noted as written: nothing landed
            raise
        returned = cursor.fetchall() if numbered else []
    if returned:
        conn.transaction_id = returned[0][-1]  # type: ignore[attr-defined]  # harbor_site.postgresql
    back = iter(returned[0][1:-1] if returned else ())
    for write in rows:
        write.done(next(back) if write.key else None)
    for ask in asks:
        ask.answer(next(back))
    return max(row[0] for row in returned) if numbered else 0


def _published(event: Written) -> dict:
    """What the live streams need to deliver an event without reading the database: its
    envelope (tokens left out, the tenant filled in by the receiver) and the inputs of the
    visibility rule (runs.identity.visibility.Viewer): the run's owner and, for a pause
    event, the pausing identity, the cause and the sealed token (and sign-in)."""
    pause = event.pause
    keys = cast(list[str], event.payload.get("_token_keys", []))
    return {
        "envelope": envelope(event, tenant_slug="", with_tokens=False),
        "owner": event.run.owner_id,
        "pause": None
        if pause is None
        else {
            "id": pause.pk,
            "user": pause.identity_user,
            "session": pause.identity_session,
            "cause": pause.cause,
            "sealed": pause.token_sealed,
            "keys": keys,
            "sign_in": _sealed_sign_in(pause, keys),
        },
    }


def _next_sequence(conn: BaseDatabaseWrapper, tenant_id: int, count: int, asks: Sequence[Ask] = ()) -> int:
    """Bump the tenant's event cursor by `count` and return its new value (answering
    `asks` in the same statement). The UPDATE holds the cursor row until commit, so
    sequences are strictly increasing in commit order and gap-free, and a reader tailing by
    sequence never skips a late-committing event. An UPDATE of a non-key column takes a "no
    key" row lock: rows that merely point at the tenant (runs, pauses, events) still insert."""
    table = Tenant._meta.db_table
    asked = "".join(f", ({ask.sql})" for ask in asks)
    with prepared_cursor(conn) as cursor:
        cursor.execute(
            f"UPDATE {table} SET event_sequence = event_sequence + %s WHERE id = %s RETURNING event_sequence{asked}",
            [count, tenant_id, *(param for ask in asks for param in ask.params)],
        )
        returned = cursor.fetchone()
    for ask, answer in zip(asks, returned[1:], strict=True):
        ask.answer(answer)
    return returned[0]


def envelope(event: "Event | Written", *, tenant_slug: str | None = None, with_tokens: bool = True) -> Envelope:
    payload = dict(event.payload)
    pause_id = payload.pop("_pause", None)
    token_keys = payload.pop("_token_keys", [])
    if token_keys and pause_id:
        payload.update(_pause_capabilities(pause_id, token_keys) if with_tokens else dict.fromkeys(token_keys))
    return {
        "type": event.type,
        "sequence": event.sequence,
        "occurred_at": event.occurred_at.isoformat().replace("+00:00", "Z"),
        "tenant": event.tenant.slug if tenant_slug is None else tenant_slug,
        "user": event.user,
        "session": event.session,
        "run": event.run_id,
        "payload": payload,
    }


def capabilities(keys: list[str], token: str | None, sign_in: dict) -> dict[str, object]:
    """The values of a pause event's held keys, for a receiver the decision rule accepts:
    the resume token, and a sign-in's address and state (tokens.sign_in_unseal)."""
    return {key: token if key in TOKEN_KEYS else sign_in.get(key) for key in keys}


def _pause_capabilities(pause_id: str, keys: list[str]) -> dict[str, object]:
    from approvals.models import Pause

    found = Pause.objects.filter(pk=pause_id).values_list("token_sealed", "payload").first()
    if found is None:
        return dict.fromkeys(keys)
    sealed, pause_payload = found
    return capabilities(keys, tokens.token_unseal(sealed) if sealed else None, tokens.sign_in_unseal(pause_payload))


# The ASGI server's event loop, once known. The in-memory channel layer lives on that
# loop, so pushes from runtime threads are handed to it rather than run on a loop of
# their own.
_server_loop: asyncio.AbstractEventLoop | None = None


def bind_server_loop(loop: asyncio.AbstractEventLoop) -> None:
    global _server_loop
    _server_loop = loop


# A push waits at most this long for the channel layer, and after a failure (not a mere
# timeout) pushes are skipped for a moment: a request never stalls on a Redis outage, and
# readers poll the log.
PUSH_TIMEOUT_SECONDS = 0.5
PUSH_BACKOFF_SECONDS = 2.0
_push_paused_until = 0.0


def _push(tenant_id: int, written: list[Written]) -> None:
    """Hand the written events to the tenant's live streams, once per write. Websockets
    deliver them from the message (no database read) when it follows their cursor, and
    read the log otherwise; the SSE stream takes it as a nudge. A lost push only delays a
    stream until its next read of the log. The message is built only for a layer that may
    have listeners."""
    if not written:
        return
    group = tenant_group(tenant_id)

    def message() -> dict:
        return {
            "type": "harbor.events",
            "group": group,  # each process hands it to its streams of this group (streams.Hub)
            "first": written[0].sequence,
            "sequence": written[-1].sequence,
            "runs": sorted({event.run_id for event in written}),
            "events": [_published(event) for event in written],
        }

    _group_send([(group, message)])


def _sealed_sign_in(pause: "Pause", keys: list[str]) -> str | None:
    """A pushed pause event's sign-in, sealed as its token is (the push crosses Redis): as
    the pause keeps it."""
    return pause.payload.get(tokens.SIGN_IN_SEALED) if any(key in SIGN_IN_KEYS for key in keys) else None


def close_streams(*, user_id: int, tenant_id: int | None = None, session_key: str | None = None) -> None:
    """Close a person's live streams (of one tenant, or one login session, when given)."""
    group = user_group(user_id)
    _group_send(
        [(group, lambda: {"type": "harbor.close", "group": group, "tenant": tenant_id, "session": session_key})]
    )


Send = tuple[Any, str, dict]  # the layer, the group, the message


class _Sender:
    """The pushes handed to one event loop, sent one after another in the order they were
    handed over. A thread hands one over with a single wake-up of the loop (none while a
    send is under way: the running one takes it along), not a task, future and timer each:
    on the runtime's threads a push cost more CPU than its two Redis round trips."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.queue: deque[Send] = deque()
        self.lock = threading.Lock()
        self.idle = threading.Event()
        self.idle.set()

    def put(self, sends: list[Send]) -> None:
        with self.lock:
            self.queue.extend(sends)
            if not self.idle.is_set():
                return  # the running send takes these along
            self.idle.clear()
        try:
            self.loop.call_soon_threadsafe(lambda: self.loop.create_task(self._send_all()))
        except RuntimeError:  # the loop closed meanwhile (a server shutting down)
            with self.lock:
                self.queue.clear()
                self.idle.set()
            raise

    def _next(self) -> Send | None:
        with self.lock:
            if self.queue:
                return self.queue.popleft()
            self.idle.set()
            return None

    async def _send_all(self) -> None:
        while (send := self._next()) is not None:
            if not await _send_one(*send):
                with self.lock:  # events queued behind it: their streams catch up from the log
                    self.queue = deque(kept for kept in self.queue if kept[2]["type"] != "harbor.events")


async def _send_one(layer: Any, group: str, message: dict) -> bool:
    """Whether the layer took the message (after a failure or a timeout, the events queued
    behind it are dropped rather than each wait its turn; a stream's close is not)."""
    global _push_paused_until
    try:
        async with asyncio.timeout(PUSH_TIMEOUT_SECONDS):
            await layer.group_send(group, message)
        return True
    except TimeoutError:
        # A busy loop as often as a hung layer: skipping the next pushes too would only turn
        # every open socket into a reader.
        log.warning("live push to %s timed out; readers catch up from the log", group)
    except (Exception, asyncio.CancelledError):
        _push_paused_until = time.monotonic() + PUSH_BACKOFF_SECONDS
        log.warning("live push to %s failed; readers catch up from the log", group, exc_info=True)
    return False


async def _send_each(sends: list[Send]) -> None:
    for send in sends:
        if not await _send_one(*send):
            return


# One sender per loop: the server's (Daphne: its layer lives there) or, in a process without
# one (a Celery worker, a command), a long-lived loop of its own, so its Redis connections
# are reused instead of a new thread, loop and connection per push.
_senders: dict[asyncio.AbstractEventLoop, _Sender] = {}
_own_loop: tuple[int, asyncio.AbstractEventLoop] | None = None
_senders_lock = threading.Lock()


def _sender() -> _Sender:
    global _own_loop
    loop = _server_loop
    with _senders_lock:
        if loop is None or not loop.is_running():
            if _own_loop is None or _own_loop[0] != os.getpid():  # a forked worker starts its own
                own = asyncio.new_event_loop()
                threading.Thread(target=own.run_forever, name="harbor-push", daemon=True).start()
                _own_loop = (os.getpid(), own)
                atexit.register(_finish_pushes)
            loop = _own_loop[1]
        if loop not in _senders:
            _senders[loop] = _Sender(loop)
        return _senders[loop]


def _finish_pushes() -> None:
    """A short-lived process (a management command, a script) sends what it committed
    before it exits, rather than leaving open inboxes to wait for their next read."""
    if _own_loop is not None and (sender := _senders.get(_own_loop[1])) is not None:
        sender.idle.wait(PUSH_TIMEOUT_SECONDS)


def _group_send(groups: list[tuple[str, Callable[[], dict]]]) -> None:
    """Send each group its message, built here (on the in-memory layer, nobody listening
    costs nothing, not even the message). Best effort, never raises: it runs after commit,
    and a live push never undoes a committed change. Over Redis pub/sub it is one PUBLISH
    on this thread (waiting at most pubsub.SEND_TIMEOUT_SECONDS); through a layer it never waits."""
    global _push_paused_until
    if time.monotonic() < _push_paused_until:
        return
    if url := pubsub.redis_url():
        try:
            pubsub.publish(url, [(group, build()) for group, build in groups])
        except Exception:
            _push_paused_until = time.monotonic() + PUSH_BACKOFF_SECONDS
            log.warning("live push to %s failed; readers catch up from the log", [g for g, _ in groups], exc_info=True)
        return
    try:
        layer = get_channel_layer()
        if layer is None:
            return
        if isinstance(layer, InMemoryChannelLayer):
            groups = [(group, build) for group, build in groups if layer.groups.get(group)]
        sends = [(layer, group, build()) for group, build in groups]
        if not sends:
            return
        if isinstance(layer, InMemoryChannelLayer) and not (_server_loop and _server_loop.is_running()):
            async_to_sync(_send_each)(sends)  # its queues belong to the caller's loop
        else:
            _sender().put(sends)
    except (Exception, asyncio.CancelledError):
        log.warning("live push to %s failed", [group for group, _ in groups], exc_info=True)
