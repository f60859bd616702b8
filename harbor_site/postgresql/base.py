"""Django's PostgreSQL backend, with its connection pool's check fit for a server restart.

The pool checks a connection as it hands it out (CONN_HEALTH_CHECKS: one empty query), and
psycopg_pool tries a pool of dead ones one by one, backing off 1 s, 2 s, 4 s… between them:
after a restart, a failover or a proxy's idle timeout (which drop every connection at once),
a request waited past the pool's timeout and failed. Here the first dead connection found
sends the pool to check all it holds, so the next one handed out is a live or a new one.
It also remembers a COMMIT whose outcome the loss of its connection left unknown: the
transaction's id (which its closing write returned: runs.domain.events) and the commit's
hooks, which Django drops with a failed commit."""

from datetime import UTC
from functools import cache
from typing import Any

import psycopg
from django.db.backends.postgresql import base
from psycopg.adapt import AdaptersMap
from psycopg.pq import Format
from psycopg_pool import ConnectionPool


def check_connection(conn: Any) -> None:
    try:
        ConnectionPool.check_connection(conn)
    except Exception:
        conn._pool.check()  # set by the pool on the connection it hands out
        raise


class _UtcTimestamptzLoader:
    """Makes psycopg's own timestamptz loader (its C one, where installed), for a connection
    whose time zone is UTC. Django's loader subclasses psycopg's pure-Python one and parses
    every value in Python; psycopg's gives the same aware datetimes in UTC. Its C class takes
    no subclass, so this class makes its loaders and names the time zone that Django's
    cursors compare with their own."""

    format = Format.TEXT
    timezone = UTC
    made = psycopg.adapters.get_loader(psycopg.adapters.types["timestamptz"].oid, Format.TEXT)

    def __new__(cls, oid: int, context: Any = None) -> Any:
        return cls.made(oid, context)  # type: ignore[misc]


@cache
def _utc_adapters(template: AdaptersMap) -> AdaptersMap:
    adapters = AdaptersMap(template)
    adapters.register_loader("timestamptz", _UtcTimestamptzLoader)  # type: ignore[arg-type]  # it makes psycopg's
    return adapters


class DatabaseWrapper(base.DatabaseWrapper):
    # A COMMIT that failed may still have been applied by the server, when what failed was
    # the connection: runs.domain.connection_loss asks the server which, by the
    # transaction's id, and runs the kept hooks if it was.
    commit_in_doubt = False
    transaction_id: str | None = None  # the open transaction's, once a write returned it
    doubted_transaction: str | None = None
    doubted_hooks: list[Any] = []

    def get_connection_params(self) -> dict[str, Any]:
        params = super().get_connection_params()
        if self.timezone is UTC:  # Django sets the session's time zone to it
            params["context"] = _utc_adapters(params["context"])
        return params

    def _commit(self) -> None:
        transaction_id, self.transaction_id = self.transaction_id, None
        hooks = list(self.run_on_commit)
        try:
            super()._commit()  # type: ignore[misc]  # the stubs have no _commit
        except Exception:
            self.commit_in_doubt = True
            self.doubted_transaction, self.doubted_hooks = transaction_id, hooks
            raise

    def _rollback(self) -> None:
        self.transaction_id = None
        super()._rollback()  # type: ignore[misc]  # the stubs have no _rollback

    def _close(self) -> None:
        self.transaction_id = None
        super()._close()  # type: ignore[misc]  # the stubs have no _close

    @property
    def pool(self) -> ConnectionPool | None:
        pool = super().pool  # type: ignore[misc]  # Django 5.1+; the stubs have no pool yet
        if pool is not None and self.settings_dict["CONN_HEALTH_CHECKS"]:
            pool._check = check_connection
        return pool
