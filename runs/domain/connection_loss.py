"""A database connection lost under a transaction (a server restart, a failover, a killed
backend, a proxy that dropped it), as requests and workers meet it. Lost before its COMMIT,
nothing of the transaction was applied; lost during it, the server may have committed before
the connection went. Nobody guesses which: what landed is read back on a new connection, by
keys the application made before the transaction first ran (a run's id, a steering
instruction's, a tool-call attempt's), under the row lock that transaction held, which waits
out a commit still on its way."""

import logging
from collections.abc import Callable
from typing import Any, TypeVar

from django.db import InterfaceError, OperationalError, connection

log = logging.getLogger("harbor.db")

T = TypeVar("T")

SHUTDOWN = {"57P01", "57P02", "57P03"}  # admin_shutdown, crash_shutdown, cannot_connect_now


def was_lost(error: BaseException) -> bool:
    """The error is the connection's loss, not the statement's: PostgreSQL's SQLSTATE class
    08, its shutdown codes, or libpq's own error, which has none (a deadlock is an
    OperationalError too, on a connection that lives on)."""
    if isinstance(error, InterfaceError):
        return True
    if not isinstance(error, OperationalError):
        return False
    sqlstate = getattr(error.__cause__, "sqlstate", "")  # psycopg's; SQLite's errors have none
    return sqlstate is None or sqlstate.startswith("08") or sqlstate in SHUTDOWN


def retry_once_if_lost(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """`fn`, which may be done twice (a read, a worker's look for work, a guarded claim), again
    on a new connection if its connection was lost."""
    try:
        return fn(*args, **kwargs)
    except Exception as error:
        if not was_lost(error) or connection.in_atomic_block:
            raise
        log.warning("the database connection was lost (%s); once more on a new one", error)
    connection.close()
    return fn(*args, **kwargs)
