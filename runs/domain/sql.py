"""The statements written by hand rather than built by the ORM: each a plain function, on
Django's own connection and cursor, in the caller's transaction, its values converted by the
model fields' own (public) conversions. Only the run loop's hottest statements live here: the
ORM compiles a statement on every call, which costs more than these statements themselves
(`bin/bench` shows it)."""

from collections.abc import Sized
from datetime import datetime
from typing import Any

from django.db import transaction
from django.db.models import Field

from runs.models import Event, Run, RunStatus, Tenant


def _table(model: type[Any]) -> str:
    return transaction.get_connection().ops.quote_name(model._meta.db_table)


def _columns(model: type[Any], *names: str) -> list[str]:
    quote = transaction.get_connection().ops.quote_name
    return [quote(field.column) for name in names if isinstance(field := model._meta.get_field(name), Field)]


_EVENT_FIELDS = ("tenant", "type", "run", "user", "session", "payload", "occurred_at")


def insert_event(event: Event) -> int:
    """Insert a new event (its sequence left empty: `number_events` gives it) and return its
    id."""
    conn = transaction.get_connection()
    columns = ", ".join(_columns(Event, *_EVENT_FIELDS))
    values = [
        field.get_db_prep_save(getattr(event, field.attname), conn)
        for field in (Event._meta.get_field(name) for name in _EVENT_FIELDS)
        if isinstance(field, Field)
    ]
    marks = ", ".join(["%s"] * len(values))
    with conn.cursor() as cursor:
        cursor.execute(f"INSERT INTO {_table(Event)} ({columns}) VALUES ({marks}) RETURNING id", values)
        (event_id,) = cursor.fetchone()
    return event_id


def number_events(tenant_id: int, event_ids: list[int]) -> dict[int, int]:
    """Number the tenant's events written by this transaction (ids in the order they were
    written) from its cursor, and return each surviving event's sequence. The cursor's UPDATE
    takes the tenant's row lock, held until commit: sequences are strictly increasing in
    commit order. UPDATE ... RETURNING (PostgreSQL, SQLite 3.35+) bumps and reads it in one
    statement. An event that a rolled-back savepoint took with it gets no number, and leaves
    no gap."""
    first = _bump(tenant_id, len(event_ids))
    numbers = {pk: first + offset for offset, pk in enumerate(event_ids)}
    if _set_sequences(numbers) == len(numbers):
        return numbers
    # A savepoint rolled back some of them: number the rest without a gap (the lock is still ours).
    kept = [pk for pk in event_ids if Event.objects.filter(pk=pk).exists()]
    _bump(tenant_id, len(kept) - len(event_ids))
    numbers = {pk: first + offset for offset, pk in enumerate(kept)}
    with transaction.get_connection().cursor() as cursor:  # no transient clash with the unique sequence
        cursor.execute(f"UPDATE {_table(Event)} SET sequence = NULL WHERE id IN ({_marks(kept)})", kept)
    _set_sequences(numbers)
    return numbers


def _bump(tenant_id: int, count: int) -> int:
    """Move the tenant's cursor by `count`; the first sequence of the `count` it made room for."""
    with transaction.get_connection().cursor() as cursor:
        cursor.execute(
            f"UPDATE {_table(Tenant)} SET event_sequence = event_sequence + %s WHERE id = %s RETURNING event_sequence",
            [count, tenant_id],
        )
        (last,) = cursor.fetchone()
    return last - count + 1


def _set_sequences(numbers: dict[int, int]) -> int:
    """One UPDATE for all of them; how many rows it found."""
    if not numbers:
        return 0
    cases = " ".join("WHEN %s THEN %s" for _ in numbers)
    params: list[object] = [value for pair in numbers.items() for value in pair]
    with transaction.get_connection().cursor() as cursor:
        cursor.execute(
            f"UPDATE {_table(Event)} SET sequence = CASE id {cases} END WHERE id IN ({_marks(numbers)})",
            [*params, *numbers],
        )
        return cursor.rowcount


def _marks(values: Sized) -> str:
    return ", ".join(["%s"] * len(values))


# A claimable run: ready, free or its holder's lease expired (it died), and queued for now
# (a step put off, lease.give_back's `after`, is not). Its parameters: the two ready
# statuses, then the time twice.
_CLAIMABLE = "status IN (%s, %s) AND (lease_owner = '' OR lease_expires_at < %s) AND queued_at <= %s"
_READY_STATUSES = [RunStatus.PENDING.value, RunStatus.RUNNING.value]
READY = f"""
    SELECT id FROM {Run._meta.db_table} AS candidate
    WHERE {_CLAIMABLE}
      AND (SELECT COUNT(*) FROM {Run._meta.db_table} AS held
           WHERE held.tenant_id = candidate.tenant_id AND held.lease_owner <> ''
             AND held.lease_expires_at >= %s) < %s
    ORDER BY priority DESC, queued_at LIMIT %s"""


def ready_run_ids(now: datetime, share: int, limit: int) -> list[str]:
    """Claimable runs (ready, free or their holder's lease expired) in the order workers take
    them, leaving out tenants holding `share` leases or more. It walks the partial index of
    ready runs (run_ready_order), and per candidate's tenant the few leased runs (run_leased)."""
    with transaction.get_connection().cursor() as cursor:
        cursor.execute(READY, ready_parameters(now, share, limit))
        return [pk for (pk,) in cursor.fetchall()]


def ready_parameters(now: datetime, share: int, limit: int) -> list[Any]:
    """READY's parameters, in its order."""
    at = transaction.get_connection().ops.adapt_datetimefield_value(now)
    return [*_READY_STATUSES, at, at, at, share, limit]


_GIVES_WAY = f"""
    SELECT EXISTS (SELECT 1 FROM {Run._meta.db_table} WHERE {_CLAIMABLE} AND priority >= %s AND id <> %s)
        OR (SELECT COUNT(*) FROM {Run._meta.db_table}
            WHERE tenant_id = %s AND lease_owner <> '' AND lease_expires_at >= %s) > %s"""


def claim(run_id: str, worker: str, now: datetime, expires: datetime) -> bool:
    """Take the run for `worker` until `expires` if it is claimable, in one guarded UPDATE;
    made again after a lost answer, a claim that landed finds the run already the worker's."""
    conn = transaction.get_connection()
    at, until = (conn.ops.adapt_datetimefield_value(value) for value in (now, expires))
    owner, expiry = _columns(Run, "lease_owner", "lease_expires_at")
    with conn.cursor() as cursor:
        cursor.execute(
            f"UPDATE {_table(Run)} SET {owner} = %s, {expiry} = %s WHERE id = %s"
            f" AND ({_CLAIMABLE} OR (status IN (%s, %s) AND lease_owner = %s))",
            [worker, until, run_id, *_READY_STATUSES, at, at, *_READY_STATUSES, worker],
        )
        return cursor.rowcount == 1


def gives_way(run: Run, now: datetime, share: int) -> bool:
    """Whether the run, after a step, gives its worker back: another run of its priority or
    higher is claimable (tenants' shares aside: its worker may well take it again), or its
    tenant holds more than its share of workers (workers that claimed at the same instant)."""
    conn = transaction.get_connection()
    at = conn.ops.adapt_datetimefield_value(now)
    with conn.cursor() as cursor:
        cursor.execute(_GIVES_WAY, [*_READY_STATUSES, at, at, run.priority, run.pk, run.tenant_id, at, share])
        return bool(cursor.fetchone()[0])
