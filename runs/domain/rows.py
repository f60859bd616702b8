"""The hot path's row statements, written out once per model instead of compiled by the ORM
on every call: the run loop and a decision lock, read, insert and update a handful of rows
per step, and the ORM's compilation costs ten times the statement (0.3-0.6 ms against
~0.04 ms). Same rows, same locks, same values: every column still goes through its field's
own conversions, both ways."""

import json
import weakref
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from datetime import datetime
from functools import partial
from typing import Any, Generic, NamedTuple, TypeVar

from django.contrib.auth import get_user_model
from django.db import InterfaceError, OperationalError, models, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models.expressions import Col
from psycopg import _queries
from psycopg.pq import TransactionStatus
from psycopg.types.json import Jsonb

from runs.domain.audit import AppendOnlyModel, AuditImmutable
from runs.models import Run, SteeringInstruction, ToolCall

M = TypeVar("M", bound=models.Model)


def prepared_cursor(conn: BaseDatabaseWrapper) -> AbstractContextManager[Any]:
    """A cursor (a context manager) whose statements PostgreSQL prepares: each is planned
    once per connection, then runs on a generic plan. Only fixed, selective statements of the
    hot path go through here; nothing else is prepared, since a generic plan over skewed
    history (the inbox's keyset pages) can be a poor one. On SQLite, a plain cursor."""
    return _prepared_cursor(conn) if conn.vendor == "postgresql" else conn.cursor()


@contextmanager
def _prepared_cursor(conn: BaseDatabaseWrapper) -> Iterator[Any]:
    with conn.cursor() as cursor:
        raw = conn.connection
        others, raw.prepare_threshold = raw.prepare_threshold, 0  # prepare at the first execution
        try:
            yield cursor
        finally:
            raw.prepare_threshold = others  # Django's default: None, prepare nothing


@contextmanager
def alone(conn: BaseDatabaseWrapper, landed: Callable[[], bool] | None = None) -> Iterator[None]:
    """On PostgreSQL, the statements of the block sent as transactions of their own while
    the surrounding transaction (the outermost) has sent nothing yet: a lone statement is
    atomic on its own, so its BEGIN and COMMIT round trips go, and the transaction's own
    statements may still go as one later (a transaction's last write, a read that takes no
    lock). Django's commit then finds nothing of theirs to commit. Elsewhere, or once the
    transaction has begun, it changes nothing. `landed`: whether the block's statement
    landed, asked if its answer is lost (runs.domain.connection_loss.what_landed)."""
    if conn.vendor != "postgresql":
        yield
        return
    conn.ensure_connection()
    raw = conn.connection
    if len(conn.atomic_blocks) != 1 or raw.info.transaction_status != TransactionStatus.IDLE:
        yield
        return
    raw.autocommit = True
    backend = None
    try:
        backend = _backend(conn) if landed is not None else None
        yield
    except (OperationalError, InterfaceError):
        # A lone statement commits itself: a connection lost in it leaves unknown whether
        # it did, as a lost COMMIT does (harbor_site.postgresql); its id never came back.
        # Its server process is named, so that it can be ended before `landed` is asked: a
        # statement still on its way could otherwise land after the answer "it did not".
        if landed is None or backend is not None:  # else the process was not named: nothing was sent
            conn.commit_in_doubt = True  # type: ignore[attr-defined]
            conn.doubted_transaction, conn.doubted_hooks = None, list(conn.run_on_commit)  # type: ignore[attr-defined]
            conn.doubted_landed, conn.doubted_backend = landed, backend  # type: ignore[attr-defined]
        raise
    finally:
        if raw.info.transaction_status == TransactionStatus.IDLE:  # a broken connection is discarded
            raw.autocommit = False


def _backend(conn: BaseDatabaseWrapper) -> tuple[int, datetime]:
    """The connection's server process: its pid and when it started (a pid alone may name
    another process later), asked once per connection."""
    raw = conn.connection
    known = getattr(raw, "_harbor_backend", None)
    if known is None:
        with conn.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid(), backend_start FROM pg_stat_activity WHERE pid = pg_backend_pid()")
            known = raw._harbor_backend = tuple(cursor.fetchone())
    return known


# psycopg remembers how it rewrote a statement's placeholders only for statements of up to 50
# parameters; a transaction's closing statement (its rows and events in one, 60-100) was
# rewritten on every execution, ~4% of a cycle's CPU. The cache stays bounded (128 texts).
_queries.MAX_CACHED_STATEMENT_PARAMS = max(_queries.MAX_CACHED_STATEMENT_PARAMS, 200)

Converter = tuple[list[Any], Col]  # a column's converters and the expression they are given


class Statement(NamedTuple):
    """A row's write, to be sent with others: its SQL and parameters; `key`, the column of a
    key the database makes, which the statement returns ("": none); and `done`, called once
    it ran, with that key or None, to note the row as written."""

    sql: str
    params: list[object]
    done: Callable[[Any], object]
    key: str = ""
    refused: Exception | None = None  # a guarded write: raised when it writes no row
    # A snapshot's guard (runs.runtime.lease.Lease.held_run): its refusal answers for any
    # guard of the transaction, which is then made again under the lock, where each answers
    # for itself; so the transaction may go as one statement of its own (events._write).
    covers: bool = False


class Beside(NamedTuple):
    """A row of another table read beside a row of this one, in the same statement: the
    first (by `order`) of its rows whose `link` points at that row and that match `where`."""

    rows: "Rows[Any]"
    link: str
    where: dict[str, object]
    order: str = ""


class Rows(Generic[M]):
    """One model's statements by primary key or by equality on a few columns."""

    def __init__(self, model: type[M], *, owner: bool = False) -> None:
        self.model, self.owner = model, owner  # owner: the row's `owner` (id, username) comes along
        self.meta = model._meta
        self.fields = list(self.meta.concrete_fields)
        self.attnames = [field.attname for field in self.fields]
        self.documents = [(i, field) for i, field in enumerate(self.fields) if isinstance(field, models.JSONField)]
        self._sql: dict[tuple, str] = {}
        self._readers: weakref.WeakKeyDictionary[BaseDatabaseWrapper, list[Converter]] = weakref.WeakKeyDictionary()

    def lock(self, order: str = "", **where: object) -> M | None:
        """The first matching row under a row lock (PostgreSQL: FOR NO KEY UPDATE; SQLite's
        immediate transaction already holds the database), or None."""
        found = self._select(where, order)
        return None if found is None else found[0]

    def lock_reading(self, expression: str, params: list[object], **where: object) -> tuple[M, Any] | None:
        """`lock`, and the value of an SQL expression (over this table's row, `params` for
        its `%s`) read in the same statement: what the caller would otherwise ask in a
        statement of its own."""
        found = self._select(where, "", reading=(expression, params))
        return None if found is None else found[:2]

    def get_reading(self, expression: str, params: list[object], **where: object) -> tuple[M, Any] | None:
        """`lock_reading` without the lock."""
        found = self._select(where, "", lock=False, reading=(expression, params))
        return None if found is None else found[:2]

    def get_reading_beside(
        self, expression: str, params: list[object], beside: Beside, **where: object
    ) -> tuple[M, Any, Any] | None:
        """`get_reading`, and the row `beside` names (None when there is none), read in the
        same statement: a caller's two lone reads in one round trip."""
        return self._select(where, "", lock=False, reading=(expression, params), beside=beside)

    def get(self, order: str = "", **where: object) -> M | None:
        """The first matching row, read without a lock (a lone read writes nothing), or None."""
        found = self._select(where, order, lock=False)
        return None if found is None else found[0]

    def insert(self, row: M, *, numbered: tuple[str, tuple[str, ...]] | None = None) -> M:
        """INSERT the row; a key the database makes (an autoincrement) comes back with it.
        With `numbered=(column, within)` that column is one past the largest among the rows
        sharing the row's `within` columns (1 for the first), counted in the same statement;
        the caller holds a lock that keeps anyone else from numbering those rows meanwhile."""
        conn = transaction.get_connection()
        statement = self._insert_statement(conn, row, numbered)
        with prepared_cursor(conn) as cursor:
            cursor.execute(statement.sql, statement.params)
            returned: tuple[Any, ...] = cursor.fetchone() if statement.key or numbered else ()
        if numbered:
            setattr(row, self._field(numbered[0]).attname, returned[-1])
        statement.done(returned[0] if statement.key else None)
        return row

    def written(self, row: M) -> Statement | None:
        """The statement that writes the row as it stands (an INSERT of a row not inserted
        yet; else an UPDATE of what changed, None when nothing did), for a caller that sends
        it with others (runs.domain.events: a transaction's last writes)."""
        conn = transaction.get_connection()
        if row._state.adding:
            return self._insert_statement(conn, row, None)
        self._check_mutable()
        return self._update_statement(conn, row, None, None)

    def written_if(self, row: M, condition: tuple[str, list[object]], refused: Exception) -> Statement:
        """`written` for a row read or written before this transaction, guarded: the UPDATE
        of what changed (its auto_now fields at least) only while the row meets `condition`
        (SQL over this table's columns, and its parameters), raising `refused` when it does
        not. A row not inserted yet is inserted only while `condition` holds (SQL that may
        read the table, not the row). The guard's refusal answers for the transaction's
        (`Statement.covers`)."""
        self._check_mutable()
        conn = transaction.get_connection()
        if row._state.adding:
            statement: Statement | None = self._insert_statement(conn, row, None, condition)
        else:
            statement = self._update_statement(conn, row, None, condition)
        assert statement is not None  # a guarded write is always sent
        return statement._replace(refused=refused, covers=True)

    def update(
        self, row: M, names: Iterable[str] | None = None, *, only_if: tuple[str, list[object]] | None = None
    ) -> bool:
        """Write the row's fields by primary key: the named ones, or those that differ from
        what this row last read or wrote (all, for a row these statements did not read);
        auto_now fields with them. Columns left alone keep their indexes untouched.
        `only_if`: SQL over this table's columns and its parameters, checked by the UPDATE
        itself; False (nothing written) when the row does not meet it."""
        self._check_mutable()
        if row._state.adding:
            return True  # not inserted yet: its insert, later in this transaction, writes it whole
        conn = transaction.get_connection()
        statement = self._update_statement(conn, row, names, only_if)
        if statement is None:
            return True  # nothing of the row changed
        with prepared_cursor(conn) as cursor:
            cursor.execute(statement.sql, statement.params)
            if only_if is not None and cursor.rowcount != 1:
                return False
        statement.done(None)
        return True

    def _insert_statement(
        self,
        conn: BaseDatabaseWrapper,
        row: M,
        numbered: tuple[str, tuple[str, ...]] | None,
        only_if: tuple[str, list[object]] | None = None,
    ) -> Statement:
        returning = row.pk is None
        column, within = numbered or ("", ())
        counted = self._field(column) if numbered else None
        fields = [field for field in self.fields if not (returning and field.primary_key)]
        params: list[object] = []
        kept: list[tuple[str, object]] = []
        for field in fields:
            if field is counted:  # its slot is the subquery over the rows it counts after
                params += self._where_params(conn, {name: getattr(row, self._field(name).attname) for name in within})
            else:
                python = field.pre_save(row, True)
                known = _kept(field, python)
                params.append(_param(conn, field, python, known))
                kept.append((field.attname, known))
        condition, condition_params = only_if or ("", [])
        assert not (condition and (returning or counted)), "a guarded insert returns nothing of its own"
        key = ("insert", conn.vendor, returning, numbered, condition)
        sql = self._cached(key, lambda: self._insert_sql(conn, fields, returning, counted, list(within), condition))
        returned = conn.ops.quote_name(self.meta.pk.column) if returning else ""
        made = [field for field in self.fields if field is counted or (returning and field.primary_key)]
        done = partial(self._inserted, conn, row, kept, made)
        return Statement(sql, [*params, *condition_params], done, returned)

    def _update_statement(
        self, conn: BaseDatabaseWrapper, row: M, names: Iterable[str] | None, only_if: tuple[str, list[object]] | None
    ) -> Statement | None:
        wanted = set(names) if names is not None else None
        stored = _stored(row)
        writes = []
        for field in self.fields:
            if field.primary_key or not (wanted is None or field.name in wanted or _auto_now(field)):
                continue
            python = field.pre_save(row, False)
            kept = _kept(field, python)
            if wanted is None and not _auto_now(field) and stored.get(field.attname, _UNKNOWN) == kept:
                continue  # unchanged since this row was last read or written
            writes.append((field, _param(conn, field, python, kept), kept))
        if all(_auto_now(field) for field, _, _ in writes) and only_if is None:
            return None
        condition, params = only_if or ("", [])
        key = ("update", conn.vendor, tuple(field.column for field, _, _ in writes), condition)
        sql = self._cached(key, lambda: self._update_sql(conn, [field for field, _, _ in writes], condition))
        pk = self.meta.pk.get_db_prep_value(row.pk, conn)
        kept_values = [(field.attname, kept) for field, _, kept in writes]
        return Statement(sql, [*(value for _, value, _ in writes), pk, *params], lambda _: stored.update(kept_values))

    def _check_mutable(self) -> None:
        if issubclass(self.model, AppendOnlyModel):
            raise AuditImmutable(f"{self.model.__name__} rows are append-only")

    def _inserted(
        self,
        conn: BaseDatabaseWrapper,
        row: M,
        kept: list[tuple[str, object]],
        made: list[models.Field],
        key: object = None,
    ) -> None:
        """Note the row as written: `kept`, its columns as sent, and `made`, those the
        database filled in (a key, a numbered column), as they came back."""
        if key is not None:
            row.pk = key
        row._state.adding, row._state.db = False, conn.alias
        stored = _stored(row)
        stored.update(kept)
        stored.update((field.attname, _kept(field, getattr(row, field.attname))) for field in made)

    def update_where(self, where: dict[str, object], **values: object) -> int:
        """UPDATE ... WHERE (equalities): the row count decides a guarded transition. The one
        write an append-only row allows after its insert (its service's single settle)."""
        statement = self._update_where_statement(where, values, None)
        with prepared_cursor(transaction.get_connection()) as cursor:
            cursor.execute(statement.sql, statement.params)
            return cursor.rowcount

    def settling(self, where: dict[str, object], refused: Exception, **values: object) -> Statement:
        """`update_where` as a statement sent with others (runs.domain.events: a transaction's
        last writes): a guarded transition that must write exactly one row, and raises
        `refused` when it writes none (its transaction then rolls back)."""
        return self._update_where_statement(where, values, refused)

    def _update_where_statement(
        self, where: dict[str, object], values: dict[str, object], refused: Exception | None
    ) -> Statement:
        conn = transaction.get_connection()
        fields = [self._field(name) for name in values]
        params = self._prepared(conn, fields, values.values())
        key = ("update_where", conn.vendor, tuple(values), tuple(where))
        sql = self._cached(key, lambda: self._update_where_sql(conn, fields, list(where)))
        return Statement(sql, [*params, *self._where_params(conn, where)], _nothing, refused=refused)

    def update_returning(self, condition: str, params: list[object], **values: object) -> M | None:
        """UPDATE the row matching `condition` (SQL over this table's columns, `%s` for
        `params`) and read it back as `lock` would, in one statement: a guarded claim that
        locks, re-checks and writes at once. None when no row matched."""
        conn = transaction.get_connection()
        fields = [self._field(name) for name in values]
        key = ("update_returning", conn.vendor, tuple(values), condition)
        sql = self._cached(key, lambda: self._update_returning_sql(conn, fields, condition))
        with prepared_cursor(conn) as cursor:
            cursor.execute(sql, [*self._prepared(conn, fields, values.values()), *params])
            found = cursor.fetchone()
        return None if found is None else self._row(conn, found)

    # statements

    def _select(
        self,
        where: dict[str, object],
        order: str,
        lock: bool = True,
        reading: tuple[str, list[object]] = ("", []),
        beside: Beside | None = None,
    ) -> tuple[M, Any, Any] | None:
        """The row, the value of `reading`'s expression (None without one), and the row
        `beside` names (None without one, or when there is none)."""
        conn = transaction.get_connection()
        expression, params = reading
        other = None if beside is None else (beside.rows, beside.link, tuple(beside.where), beside.order)
        key = ("select", conn.vendor, tuple(where), order, lock, expression, other)
        sql = self._cached(key, lambda: self._select_sql(conn, list(where), order, lock, expression, beside))
        if beside is not None:
            params = [*params, *beside.rows._where_params(conn, beside.where)]
        # A read that takes no lock, sent while its transaction has sent nothing, goes alone:
        # it needs no BEGIN, and lands nothing if its answer is lost.
        with alone(conn, _wrote_nothing) if not lock else nullcontext(), prepared_cursor(conn) as cursor:
            cursor.execute(sql, [*params, *self._where_params(conn, where)])
            found = cursor.fetchone()
        if found is None:
            return None
        width = len(self.fields) + (2 if self.owner else 0)
        value = found[width] if expression else None
        other_row = None
        if beside is not None and (rest := found[width + bool(expression) :])[0] is not None:
            other_row = beside.rows.built(conn, rest)
        return self._row(conn, found[:width]), value, other_row

    def columns(self, conn: BaseDatabaseWrapper, alias: str) -> list[str]:
        """This model's columns as `built` takes them, under `alias`, for a statement that
        reads them beside other tables'."""
        return [f"{alias}.{conn.ops.quote_name(field.column)}" for field in self.fields]

    def built(self, conn: BaseDatabaseWrapper, found: tuple) -> M:
        """The model of a row of `columns`' values, converted as Django's compiler would, and
        remembered as `update` compares."""
        values = list(found[: len(self.fields)])
        for index, (converters, expression) in enumerate(self._converters(conn)):
            for convert in converters:
                values[index] = convert(values[index], expression, conn)
        row = self.model.from_db(conn.alias, self.attnames, values)
        stored = dict(zip(self.attnames, values, strict=True))
        for index, field in self.documents:
            stored[field.attname] = _kept_read(conn, field, found[index], values[index])
        row.__dict__[_STORED] = stored
        return row

    def _row(self, conn: BaseDatabaseWrapper, found: tuple) -> M:
        row = self.built(conn, found)
        if self.owner:
            user_model = get_user_model()
            row._state.fields_cache["owner"] = user_model.from_db(conn.alias, ["id", "username"], found[-2:])
        return row

    def _update_returning_sql(self, conn: BaseDatabaseWrapper, fields: list[models.Field], condition: str) -> str:
        quote, table = conn.ops.quote_name, self.meta.db_table
        columns = [quote(field.column) for field in self.fields]
        if self.owner:  # RETURNING reads only the updated table: the username by subquery
            users, owner = get_user_model()._meta.db_table, quote(self._field("owner").column)
            columns += [owner, f"(SELECT {quote('username')} FROM {quote(users)} WHERE {quote('id')} = {owner})"]
        assignments = ", ".join(f"{quote(field.column)} = %s" for field in fields)
        return f"UPDATE {quote(table)} SET {assignments} WHERE {condition} RETURNING {', '.join(columns)}"

    def _select_sql(
        self,
        conn: BaseDatabaseWrapper,
        where: list[str],
        order: str,
        lock: bool,
        reading: str,
        beside: Beside | None = None,
    ) -> str:
        quote, table = conn.ops.quote_name, self.meta.db_table
        columns = [f"{quote(table)}.{quote(field.column)}" for field in self.fields]
        joins = ""
        if self.owner:
            users = get_user_model()._meta.db_table
            owner_column = self._field("owner").column
            columns += [f"{quote(users)}.{quote('id')}", f"{quote(users)}.{quote('username')}"]
            joins = f" JOIN {quote(users)} ON {quote(users)}.{quote('id')} = {quote(table)}.{quote(owner_column)}"
        if reading:
            columns.append(reading)
        if beside is not None:
            other = beside.rows
            other_table, other_pk = quote(other.meta.db_table), quote(other.meta.pk.column)
            linked = f"{quote(other._field(beside.link).column)} = {quote(table)}.{quote(self.meta.pk.column)}"
            conditions = [
                f"{other_table}.{linked}",
                *([other._where_sql(conn, list(beside.where))] if beside.where else []),
            ]
            first = f"SELECT {other_table}.{other_pk} FROM {other_table} WHERE {' AND '.join(conditions)}"
            first += other._order_sql(conn, beside.order)
            columns += other.columns(conn, "beside")
            joins += f" LEFT JOIN {other_table} AS beside ON beside.{other_pk} = ({first} LIMIT 1)"
        sql = f"SELECT {', '.join(columns)} FROM {quote(table)}{joins} WHERE {self._where_sql(conn, where)}"
        sql += self._order_sql(conn, order) + " LIMIT 1"
        if lock and conn.features.has_select_for_update:
            strength = "NO KEY UPDATE" if conn.features.has_select_for_no_key_update else "UPDATE"
            sql += f" FOR {strength} OF {quote(table)}"
        return sql

    def _insert_sql(
        self,
        conn: BaseDatabaseWrapper,
        fields: list[models.Field],
        returning: bool,
        counted: models.Field | None,
        within: list[str],
        condition: str = "",
    ) -> str:
        quote = conn.ops.quote_name
        table = quote(self.meta.db_table)
        columns = ", ".join(quote(field.column) for field in fields)
        following = (
            f"(SELECT COALESCE(MAX({quote(counted.column)}), 0) + 1 FROM {table} WHERE {self._where_sql(conn, within)})"
            if counted
            else ""
        )
        slots = ", ".join(following if field is counted else "%s" for field in fields)
        if condition:  # a row, or none when the condition does not hold
            if conn.vendor == "postgresql":  # a SELECT's parameters are typed by nothing else
                slots = ", ".join(f"CAST(%s AS {field.db_type(conn)})" for field in fields)
            return f"INSERT INTO {table} ({columns}) SELECT {slots} WHERE {condition}"
        back = [self.meta.pk] if returning else []
        back += [counted] if counted is not None else []
        sql = f"INSERT INTO {table} ({columns}) VALUES ({slots})"
        return sql + (f" RETURNING {', '.join(quote(field.column) for field in back)}" if back else "")

    def _update_sql(self, conn: BaseDatabaseWrapper, fields: list[models.Field], condition: str = "") -> str:
        quote = conn.ops.quote_name
        assignments = ", ".join(f"{quote(field.column)} = %s" for field in fields)
        sql = f"UPDATE {quote(self.meta.db_table)} SET {assignments} WHERE {quote(self.meta.pk.column)} = %s"
        return sql + (f" AND {condition}" if condition else "")

    def _update_where_sql(self, conn: BaseDatabaseWrapper, fields: list[models.Field], where: list[str]) -> str:
        quote = conn.ops.quote_name
        assignments = ", ".join(f"{quote(field.column)} = %s" for field in fields)
        return f"UPDATE {quote(self.meta.db_table)} SET {assignments} WHERE {self._where_sql(conn, where)}"

    def _order_sql(self, conn: BaseDatabaseWrapper, order: str) -> str:
        """ORDER BY a column of this table ("-name": descending), or nothing for no order."""
        if not order:
            return ""
        quote = conn.ops.quote_name
        column = quote(self._field(order.lstrip("-")).column)
        return f" ORDER BY {quote(self.meta.db_table)}.{column}{' DESC' if order.startswith('-') else ''}"

    def _where_sql(self, conn: BaseDatabaseWrapper, names: list[str]) -> str:
        quote, table = conn.ops.quote_name, self.meta.db_table
        return " AND ".join(f"{quote(table)}.{quote(self._field(name).column)} = %s" for name in names)

    def _where_params(self, conn: BaseDatabaseWrapper, where: dict[str, object]) -> list[object]:
        params = []
        for name, value in where.items():
            field = self._field(name)
            if isinstance(value, models.Model):
                value = value.pk
            target = field.target_field if field.is_relation else field
            params.append(target.get_db_prep_value(value, conn))
        return params

    def _prepared(self, conn: BaseDatabaseWrapper, fields: list[Any], values: Iterable[object]) -> list[object]:
        return [
            field.get_db_prep_save(value.pk if isinstance(value, models.Model) else value, conn)
            for field, value in zip(fields, values, strict=True)
        ]

    def _field(self, name: str) -> Any:
        return self.meta.pk if name == "pk" else self.meta.get_field(name)

    def _converters(self, conn: BaseDatabaseWrapper) -> list[Converter]:
        """Django's read conversions per column (the backend's, then the field's), as its
        compiler applies them."""
        if conn not in self._readers:
            readers = []
            for field in self.fields:
                expression = field.get_col(self.meta.db_table)
                readers.append(
                    (conn.ops.get_db_converters(expression) + expression.get_db_converters(conn), expression)
                )
            self._readers[conn] = readers
        return self._readers[conn]

    def _cached(self, key: tuple, build: Any) -> str:
        sql = self._sql.get(key)
        if sql is None:
            sql = self._sql[key] = build()
        return sql


def _nothing(_: object) -> None:
    pass


def _wrote_nothing() -> bool:
    return False


_STORED = "_rows_stored"  # on an instance: its columns as last read or written (see _kept)
_UNKNOWN = object()


def _stored(row: models.Model) -> dict[str, object]:
    return row.__dict__.setdefault(_STORED, {})


def _kept(field: models.Field, python: object) -> object:
    """What a column's last known value is compared by: its Python value, or for JSON (a
    mutable object, possibly changed in place) its text, the same on every backend (an
    unchanged document is not written again, however large)."""
    if isinstance(field, models.JSONField):
        return json.dumps(python, cls=field.encoder)
    return python


def _param(conn: BaseDatabaseWrapper, field: models.Field, python: object, kept: object) -> object:
    """A column's parameter, as its field converts it; a JSON document from `kept`, its text,
    so that it is encoded once (as the field's own conversion would encode it)."""
    if python is None or not isinstance(field, models.JSONField):
        return field.get_db_prep_save(python, conn)
    return Jsonb(kept, dumps=str) if conn.vendor == "postgresql" else kept


def _kept_read(conn: BaseDatabaseWrapper, field: models.Field, text: object, python: object) -> object:
    """`_kept` of a JSON column just read. SQLite hands back the text as it was written, and
    a text equal to what `_kept` gives later is that same document: it serves as it is, with
    no second encoding (a text written some other way costs at most one needless write).
    PostgreSQL's jsonb comes back normalized (its own key order), so it is encoded again."""
    if conn.vendor == "sqlite" and isinstance(text, str):
        return text
    return _kept(field, python)


def _auto_now(field: models.Field) -> bool:
    return bool(getattr(field, "auto_now", False))


RUNS = Rows(Run, owner=True)
TOOL_CALLS = Rows(ToolCall)
INSTRUCTIONS = Rows(SteeringInstruction)
