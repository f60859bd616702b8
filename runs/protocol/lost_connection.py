"""A /v1/ request whose database connection was lost mid-way (a server restart, a failover, a
killed backend) is answered again, once, on a new connection: nothing it did was committed,
so the second answer is the only one. When the loss came during its COMMIT, the server may
have committed before the connection went: such a request is answered again only if doing
so applies it once anyway: a read; a start, which chose its run's id before its first
answer and looks for that run before making one; a control with an `event_id` (PROTOCOL
§2). Any other is answered `runtime_error`, saying it may have taken effect."""

from collections.abc import Callable
from typing import Any, TypeVar

from django.db import InterfaceError, OperationalError, connection

T = TypeVar("T")

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


def may_answer_again(error: BaseException, *, replayable: bool) -> bool:
    """`replayable`: answering the request twice applies it once."""
    return was_lost(error) and (replayable or not commit_in_doubt()) and not connection.in_atomic_block


def begin() -> None:
    """Before answering: no earlier request's doubt is this one's."""
    connection.commit_in_doubt = False  # type: ignore[attr-defined]  # set by harbor_site.postgresql


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
        if not may_answer_again(error, replayable=True):
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
