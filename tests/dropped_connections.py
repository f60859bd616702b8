"""The tests' ways of dropping PostgreSQL connections, as a restart, a failover or a killed
backend would: really terminated, from a connection of their own."""

import psycopg
from django.db import connection


def terminate(pids: list[int]) -> None:
    """Terminate these server connections; returns once they are gone."""
    params = {k: v for k, v in connection.get_connection_params().items() if k != "cursor_factory"}
    with psycopg.connect(**params, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(pid, 5000) FROM unnest(%s::int[]) AS pid", [pids])


def terminate_own_backend() -> None:
    terminate([connection.connection.info.backend_pid])


def commit_then_lose_the_answer() -> None:
    """This thread's connection's next COMMIT reaches the server and is applied; its answer
    is lost on the way back."""
    connection.ensure_connection()
    raw = connection.connection
    commit = raw.commit

    def committed_then_lost() -> None:
        raw.commit = commit
        raw.execute("COMMIT")
        terminate([raw.info.backend_pid])
        raw.execute("SELECT 1")  # the server is gone: a real loss, raised here

    raw.commit = committed_then_lost


def lone_statement_then_lose_the_answer() -> None:
    """This thread's connection's next closing statement sent alone (runs.domain.rows.alone:
    a transaction's writes as one autocommitted statement, its CTEs) reaches the server and
    is applied; its answer is lost on the way back."""
    connection.ensure_connection()
    raw = connection.connection
    plain = raw.cursor

    def cursor(*args, **kwargs):
        made = plain(*args, **kwargs)
        execute = made.execute

        def applied_then_lost(query, params=None, **options):
            if not (raw.autocommit and connection.in_atomic_block and str(query).startswith("WITH ")):
                return execute(query, params, **options)
            raw.cursor = plain
            execute(query, params, **options)
            terminate([raw.info.backend_pid])
            raw.execute("SELECT 1")  # the server is gone: a real loss, raised here

        made.execute = applied_then_lost
        return made

    raw.cursor = cursor
