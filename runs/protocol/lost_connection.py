"""A /v1/ request whose database connection was lost mid-way (a server restart, a failover, a
killed backend) is answered again, once, on a new connection: nothing it did was committed,
so the second answer is the only one. When the loss came during its COMMIT, the server may
have committed before the connection went. A request that applies once however often it is
answered is answered again: a read; a start, which chose its run's id before its first
answer and looks for that run before making one; a control with an `event_id` (PROTOCOL
§2). Any other asks PostgreSQL what became of its transaction, by the id its closing write
returned: aborted, it is answered again; committed, it is answered as applied, and what the
commit would have set off (a worker woken, live pushes) runs then. A transaction still in
progress (a server that has not noticed the loss yet) or whose id never came back is
answered `runtime_error`, saying it may have taken effect."""

import logging
import time
from collections.abc import Callable
from typing import Any, TypeVar

from django.db import InterfaceError, OperationalError, connection

T = TypeVar("T")

log = logging.getLogger("harbor.protocol")

SHUTDOWN = {"57P01", "57P02", "57P03"}  # admin_shutdown, crash_shutdown, cannot_connect_now


class AnswerAgain(Exception):
    """Raised out of a view's error handling to have the request answered again."""


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


class Outcome:
    ANSWER_AGAIN = "answer again"  # nothing of it was committed, or answering it twice applies it once
    LANDED = "landed"  # its COMMIT was applied after all: answer it as applied


def after_loss(error: BaseException, *, replayable: bool) -> str | None:
    """What to do with a request that `error` interrupted, if it lost its connection: an
    Outcome, or None to answer the error. `replayable`: answering the request twice applies
    it once."""
    if not was_lost(error) or connection.in_atomic_block:
        return None
    if replayable or not commit_in_doubt():
        return Outcome.ANSWER_AGAIN
    outcome = commit_outcome()
    if outcome == "aborted":
        return Outcome.ANSWER_AGAIN
    if outcome == "committed":
        _run_kept_hooks()
        return Outcome.LANDED
    return None


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


def _run_kept_hooks() -> None:
    """The on_commit callbacks of a commit that landed after all (Django drops them when
    the commit raises): wake-ups, hand-offs and live pushes, as after any commit."""
    hooks, connection.doubted_hooks = getattr(connection, "doubted_hooks", []), []  # type: ignore[attr-defined]
    for _savepoints, hook, _robust in hooks:
        try:
            hook()
        except Exception:  # the decision stands; a lost wake-up is the sweep's to make up
            log.exception("a commit hook of a transaction that landed after all failed")


def begin() -> None:
    """Before answering: no earlier request's doubt is this one's."""
    connection.commit_in_doubt = False  # type: ignore[attr-defined]  # set by harbor_site.postgresql
    connection.doubted_transaction, connection.doubted_hooks = None, []  # type: ignore[attr-defined]


def reconnect() -> None:
    """Let the next query take a new connection (the pool discards the lost one)."""
    connection.close()
    begin()


def once_more_if_lost(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """`fn`, a read, again on a new connection if its connection was lost."""
    begin()
    try:
        return fn(*args, **kwargs)
    except Exception as error:
        if after_loss(error, replayable=True) is None:
            raise
    reconnect()
    return fn(*args, **kwargs)


def lost_message() -> str:
    if commit_in_doubt():
        return (
            "the database connection was lost while this request committed: it may have taken effect. "
            "A control with an event_id applies once however often it is sent"
        )
    return "the database connection was lost; try again"
