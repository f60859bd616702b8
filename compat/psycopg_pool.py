"""psycopg_pool's internals the product relies on, where neither it nor Django has a public
hook.

- `check_all_on_a_dead_one`: the pool checks each connection as it hands it out (Django
  gives it `ConnectionPool.check_connection` when CONN_HEALTH_CHECKS is on, and refuses a
  check of the product's among the pool options). On a dead one psycopg_pool tries the next
  after backing off 1 s, 2 s, 4 s…: after a restart or a failover, which drop every pooled
  connection at once, a request waited past the pool's timeout and failed. Wrapped here,
  the first dead connection found has the pool check all it holds (its public `check()`),
  so the next one handed out is live or new."""

from typing import Any

from django.db.backends.signals import connection_created
from psycopg_pool import ConnectionPool

from compat import Checked

CHECKED = Checked("psycopg-pool", lowest=(3, 2), below=(3, 4))  # read against 3.3.3


def check_all_on_a_dead_one(pool: ConnectionPool) -> None:
    check = pool._check  # the hand-out check the pool was made with
    if check is None or getattr(check, "checks_all", False):
        return

    def checked(conn: Any) -> None:
        try:
            check(conn)
        except Exception:
            pool.check()
            raise

    checked.checks_all = True  # type: ignore[attr-defined]
    pool._check = checked


def _on_connection_created(sender: object, connection: Any, **kwargs: Any) -> None:
    pool = getattr(connection, "pool", None)  # PostgreSQL's, when pooled; SQLite has none
    if isinstance(pool, ConnectionPool):
        check_all_on_a_dead_one(pool)


def install() -> None:
    """From the first connection the pool hands out on: called once, at app start."""
    connection_created.connect(_on_connection_created, dispatch_uid="harbor-check-all-on-a-dead-one")
