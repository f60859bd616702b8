"""The statements written by hand rather than built by the ORM: each a plain function, on
Django's own connection and cursor, in the caller's transaction. Only what the ORM cannot say
in one statement lives here."""

from django.db import transaction
from django.db.models import BigIntegerField, Case, F, Value, When

from runs.models import Event, Tenant

_BUMP = (
    f"UPDATE {Tenant._meta.db_table} SET event_sequence = event_sequence + %s WHERE id = %s RETURNING event_sequence"
)


def number_events(tenant_id: int, event_ids: list[int]) -> dict[int, int]:
    """Number the tenant's events written by this transaction (ids in the order they were
    written) from its cursor, and return each surviving event's sequence. The cursor's UPDATE
    takes the tenant's row lock, held until commit: sequences are strictly increasing in
    commit order. UPDATE ... RETURNING (PostgreSQL, SQLite 3.35+) bumps and reads it in one
    statement; the ORM needs two. An event that a rolled-back savepoint took with it gets no
    number, and leaves no gap."""
    with transaction.get_connection().cursor() as cursor:
        cursor.execute(_BUMP, [len(event_ids), tenant_id])
        (last,) = cursor.fetchone()
    first = last - len(event_ids) + 1
    numbers = {pk: first + offset for offset, pk in enumerate(event_ids)}
    if _set_sequences(numbers) == len(numbers):
        return numbers
    # A savepoint rolled back some of them: number the rest without a gap (the lock is still ours).
    kept = list(Event.objects.filter(pk__in=event_ids).order_by("pk").values_list("pk", flat=True))
    Tenant.objects.filter(pk=tenant_id).update(event_sequence=F("event_sequence") - (len(event_ids) - len(kept)))
    Event.objects.filter(pk__in=kept).settle(sequence=None)  # no transient clash with the unique sequence
    numbers = {pk: first + offset for offset, pk in enumerate(kept)}
    _set_sequences(numbers)
    return numbers


def _set_sequences(numbers: dict[int, int]) -> int:
    """One UPDATE for all of them (the ORM's bulk_update, on an append-only table)."""
    by_id = Case(*(When(pk=pk, then=Value(n)) for pk, n in numbers.items()), output_field=BigIntegerField())
    return Event.objects.filter(pk__in=list(numbers)).settle(sequence=by_id)
