"""Django's PostgreSQL backend, with its connection pool's check fit for a server restart.

The pool checks a connection as it hands it out (CONN_HEALTH_CHECKS: one empty query), and
psycopg_pool tries a pool of dead ones one by one, backing off 1 s, 2 s, 4 s… between them:
after a restart, a failover or a proxy's idle timeout (which drop every connection at once),
a request waited past the pool's timeout and failed. Here the first dead connection found
sends the pool to check all it holds, so the next one handed out is a live or a new one.
It also remembers a COMMIT whose outcome the loss of its connection left unknown."""

from typing import Any

from django.db.backends.postgresql import base
from psycopg_pool import ConnectionPool


def check_connection(conn: Any) -> None:
    try:
        ConnectionPool.check_connection(conn)
    except Exception:
        conn._pool.check()  # set by the pool on the connection it hands out
        raise


class DatabaseWrapper(base.DatabaseWrapper):
    # A COMMIT that failed may still have been applied by the server, when what failed was
    # the connection: runs.protocol.lost_connection answers such a request again only if
    # that applies it once anyway.
    commit_in_doubt = False

    def _commit(self) -> None:
        try:
            super()._commit()  # type: ignore[misc]  # the stubs have no _commit
        except Exception:
            self.commit_in_doubt = True
            raise

    @property
    def pool(self) -> ConnectionPool | None:
        pool = super().pool  # type: ignore[misc]  # Django 5.1+; the stubs have no pool yet
        if pool is not None and self.settings_dict["CONN_HEALTH_CHECKS"]:
            pool._check = check_connection
        return pool
