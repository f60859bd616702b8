"""A database connection lost under a transaction (a server restart, a failover, a killed
backend), as requests and workers meet it. Lost before its COMMIT, nothing of the
transaction was applied. Lost during its COMMIT, or during a statement that commits itself
(`rows.alone`), the server may have committed before the connection went: the backend
remembers that (harbor_site.postgresql), with the transaction's id, which its closing write
returned (`events._insert`), and the commit's hooks, which Django drops with a failed
commit. PostgreSQL then says what became of it (`pg_xact_status`)."""

import logging
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any, TypeVar

from django.db import DEFAULT_DB_ALIAS, DatabaseError, InterfaceError, OperationalError, connection, connections

from runs.domain import events

log = logging.getLogger("harbor.db")

T = TypeVar("T")

SHUTDOWN = {"57P01", "57P02", "57P03"}  # admin_shutdown, crash_shutdown, cannot_connect_now


def was_lost(error: BaseException) -> bool:
    """The error is the connection's loss, not the statement's: PostgreSQL's SQLSTATE class
    08, its shutdown codes, or libpq's own error, which has none (a deadlock is an
    OperationalError too, on a connection that lives on). The connection itself cannot
    tell: leaving the failed transaction has already opened a new one."""
    if isinstance(error, InterfaceError):
        return True
    if not isinstance(error, OperationalError):
        return False
    sqlstate = getattr(error.__cause__, "sqlstate", "")  # psycopg's; SQLite's errors have none
    return sqlstate is None or sqlstate.startswith("08") or sqlstate in SHUTDOWN


def commit_in_doubt() -> bool:
    return bool(getattr(connection, "commit_in_doubt", False))


def forget_doubt() -> None:
    """Before a new unit of work: no earlier transaction's doubt is its own."""
    conn: Any = connections[DEFAULT_DB_ALIAS]  # one lookup, not one per attribute through the proxy
    conn.commit_in_doubt = False  # set by harbor_site.postgresql
    conn.doubted_transaction, conn.doubted_hooks = None, []
    conn.doubted_landed = conn.doubted_backend = None  # set by rows.alone


def commit_outcome(timeout: float = 2.0) -> str | None:
    """What became of the transaction whose COMMIT is in doubt, asked on a new connection:
    "committed" or "aborted"; None if that cannot be learned (its id never came back, it
    is still in progress after `timeout`, or the server cannot be reached)."""
    transaction_id = getattr(connection, "doubted_transaction", None)
    if transaction_id is None:
        return None
    connection.close()
    deadline = time.monotonic() + timeout
    try:
        while True:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_xact_status(%s::xid8)", [transaction_id])
                (status,) = cursor.fetchone()
            if status != "in progress":
                return status  # or None: too old for the server to remember
            if time.monotonic() > deadline:
                return None
            time.sleep(0.05)
    except (OperationalError, InterfaceError):
        return None


def what_landed() -> str | None:
    """After a transaction lost its connection: "aborted" (nothing of it landed), "committed"
    (its COMMIT, in doubt, landed: the hooks Django dropped with it have now run), or None
    (that cannot be learned). A statement sent alone, whose id never came back, is asked by
    what it wrote, where it can tell (rows.alone's `landed`)."""
    if not commit_in_doubt():
        return "aborted"
    outcome = commit_outcome()
    landed = getattr(connection, "doubted_landed", None)
    if outcome is None and landed is not None and getattr(connection, "doubted_transaction", None) is None:
        backend = connection.doubted_backend  # type: ignore[attr-defined]  # set with doubted_landed
        connection.close()
        try:
            if not _ended(*backend):
                return None
            outcome = "committed" if landed() else "aborted"
        except DatabaseError:
            return None
    if outcome == "committed":
        _run_kept_hooks()
    return outcome


def _ended(pid: int, started: datetime) -> bool:
    """End the server process that ran a statement whose answer was lost, if it still runs
    (the same pid started at the same time): once it is gone, nothing of that statement can
    still land. False if it outlived five seconds."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity WHERE pid = %s AND backend_start = %s",
            [pid, started],
        )
        found = cursor.fetchone()
    return found is None or bool(found[0])


def _run_kept_hooks() -> None:
    """The on_commit callbacks of a commit that landed after all: wake-ups, hand-offs and
    live pushes, as after any commit."""
    hooks, connection.doubted_hooks = getattr(connection, "doubted_hooks", []), []  # type: ignore[attr-defined]
    for _savepoints, hook, _robust in hooks:
        try:
            hook()
        except Exception:  # what was committed stands; a lost wake-up is the sweep's to make up
            log.exception("a commit hook of a transaction that landed after all failed")


def once_more_if_lost(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """`fn`, which may be done twice (a read, a worker's look for work), again on a new
    connection if its connection was lost."""
    forget_doubt()
    try:
        return fn(*args, **kwargs)
    except Exception as error:
        if not was_lost(error) or connection.in_atomic_block:
            raise
        log.warning("the database connection was lost (%s); once more on a new one", error)
    connection.close()
    forget_doubt()
    return fn(*args, **kwargs)


def atomic_surviving_loss(work: Callable[[], T], *, run_id: str) -> T:
    """`work` in a service transaction (events.atomic), and what it returned. A connection
    lost before the COMMIT has it done once more on a new connection; one lost during the
    COMMIT, if PostgreSQL says it landed, has it taken as done. For a worker's transactions
    that re-check what they rely on under their locks, and whose loss would cost what came
    before them: a tool's body, a planner's answer."""
    for tries_left in (1, 0):
        done: list[T] = []
        forget_doubt()
        try:
            with events.atomic():
                done.append(work())
            return done[0]
        except (OperationalError, InterfaceError) as error:
            if not tries_left or not was_lost(error):
                raise
            outcome = what_landed()
            if outcome == "committed":
                return done[0]
            if outcome != "aborted":
                raise
            log.warning("run %s: the database connection was lost (%s); once more on a new one", run_id, error)
            connection.close()
    raise AssertionError("unreachable")
