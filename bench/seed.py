"""Bulk history for the benchmark's read figures: runs and their pauses, the shape a tenant
has after a long life (1 % of pauses open, the rest decided, spread over a year among ten
members). No events: the reads measured here are pause.list and the inbox, which never read
the log.

A million rows through `bulk_create` spend their time building models and SQL, not in the
database. So each kind of row is converted the ORM's way once (a prototype: every column as
Django writes it), each row copies it and sets only what varies, and the rows go in with
COPY on PostgreSQL, `executemany` on SQLite. Afterwards the tables are analysed, as a
long-lived database's are (autovacuum), so the planner sees the history it holds."""

import secrets
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import User
from django.db import connection, transaction
from django.db.models import Model
from django.utils import timezone

from approvals.models import Cause, Decision, Pause, PauseState, Reason
from runs.domain.tokens import token_mint, token_seal
from runs.identity.callers import Caller
from runs.identity.permissions import membership_grant
from runs.kernel.ids import new_ulid
from runs.models import Role, Run, RunStatus

BATCH = 20_000
OPEN_EVERY = 100  # one open pause in a hundred: 1k open at 100k, 10k at 1M
MEMBERS = 10
SEEDED_TABLES = (Run, Pause)


def _owners(caller: Caller) -> list[User]:
    """The caller and nine more members of its tenant, who share the history."""
    users = get_user_model()
    owners = [caller.user]
    for index in range(1, MEMBERS):
        user, _ = users.objects.get_or_create(username=f"bench-member-{index}")
        membership_grant(tenant=caller.tenant, user=user, role=Role.MEMBER)
        owners.append(user)
    return owners


class _Rows:
    """Rows of one model built from a prototype instance: its columns converted once, as
    Django would write them; `row(**changes)` swaps in the columns that vary."""

    def __init__(self, prototype: Model) -> None:
        fields = prototype._meta.local_concrete_fields
        self.model = type(prototype)
        self.columns = [field.column for field in fields]
        self.values = [field.get_db_prep_save(field.pre_save(prototype, add=True), connection) for field in fields]
        self.index = {column: position for position, column in enumerate(self.columns)}

    def row(self, **changes: Any) -> list[Any]:
        values = list(self.values)
        for column, value in changes.items():
            values[self.index[column]] = value
        return values


def _write(rows: _Rows, values: Sequence[list[Any]]) -> None:
    quote = connection.ops.quote_name
    table, names = quote(rows.model._meta.db_table), ", ".join(quote(column) for column in rows.columns)
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            with cursor.cursor.copy(f"COPY {table} ({names}) FROM STDIN") as copy:
                for value in values:
                    copy.write_row(value)
        else:
            marks = ", ".join(["%s"] * len(rows.columns))
            cursor.executemany(f"INSERT INTO {table} ({names}) VALUES ({marks})", values)


def _analyse() -> None:
    """What autovacuum does for a long-lived database: statistics (and, on PostgreSQL, the
    visibility map that lets a count read only the index)."""
    tables = ", ".join(connection.ops.quote_name(model._meta.db_table) for model in SEEDED_TABLES)
    with connection.cursor() as cursor:
        if connection.vendor != "postgresql":
            cursor.execute("ANALYZE")
        elif connection.in_atomic_block:  # a test's transaction: VACUUM cannot run in one
            cursor.execute(f"ANALYZE {tables}")
        else:
            cursor.execute(f"VACUUM ANALYZE {tables}")


def seed_history(*, caller: Caller, count: int, decider: User, progress: Callable[[int], object] | None = None) -> None:
    """Write `count` runs, each with one pause; every hundredth pause is open."""
    owners = _owners(caller)
    when: Callable[[datetime], Any] = connection.ops.adapt_datetimefield_value
    run_kind = {
        is_open: _Rows(
            Run(
                tenant=caller.tenant,
                owner=caller.user,
                session="bench-seed",
                agent_id="bench_gate",
                goal="launch",
                status=RunStatus.PAUSED if is_open else RunStatus.COMPLETE,
            )
        )
        for is_open in (True, False)
    }
    pause_kind = {
        is_open: _Rows(
            Pause(
                tenant=caller.tenant,
                run_id="",
                cause=Cause.HITL_APPROVAL,
                reason=Reason.APPROVAL_REQUIRED,
                token_sealed=token_seal(token_mint()),  # one sealed token serves every row: only the digest is unique
                identity_session="bench-seed",
                tool="launch",
                step=1,
                payload={"Tool": "launch", "Args": {"target": "moon"}},
                **(
                    {}
                    if is_open
                    else {
                        "state": PauseState.RESUMED,
                        "decision": Decision.APPROVE,
                        "decided_by": decider,
                        "decided_session": "bench-seed",
                    }
                ),
            )
        )
        for is_open in (True, False)
    }
    now = timezone.now()
    span = timedelta(days=365)
    for start in range(0, count, BATCH):
        runs, pauses = [], []
        for index in range(start, min(start + BATCH, count)):
            created = now - span + span * (index / count)
            owner = owners[index % len(owners)]
            is_open = index % OPEN_EVERY == OPEN_EVERY - 1
            run_id = new_ulid()
            runs.append(
                run_kind[is_open].row(
                    id=run_id,
                    owner_id=owner.pk,
                    created_at=when(created),
                    finished_at=None if is_open else when(created + timedelta(minutes=2)),
                )
            )
            decided = (
                {}
                if is_open
                else {
                    "decided_at": when(created + timedelta(minutes=1)),
                    "on_behalf_of": f"{caller.tenant.slug}/{owner.username}/bench-seed",
                }
            )
            pauses.append(
                pause_kind[is_open].row(
                    id=new_ulid(),
                    run_id=run_id,
                    token_digest=secrets.token_hex(32),
                    identity_user=owner.username,
                    created_at=when(created),
                    **decided,
                )
            )
        with transaction.atomic():
            _write(run_kind[True], runs)
            _write(pause_kind[True], pauses)
        if progress is not None:
            progress(min(start + BATCH, count))
    _analyse()
