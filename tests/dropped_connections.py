"""The tests' ways of dropping PostgreSQL connections, as a restart, a failover or a killed
backend would: really terminated, from a connection of their own."""

import contextlib
from collections.abc import Iterator
from typing import Any, Literal

import psycopg
from django.db import connection

When = Literal["before", "during", "after"]
WHENS: tuple[When, ...] = ("before", "during", "after")


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
        commit()
        terminate([raw.info.backend_pid])
        raw.execute("SELECT 1")  # the server is gone: a real loss, raised here

    raw.commit = committed_then_lost


class LoseConnection:
    """Loses this thread's connection at one commit: a transaction's COMMIT, or a statement
    sent outside any transaction (it commits itself). The commit struck is the `nth` of those
    that wrote with `wrote` (a statement's beginning, such as 'INSERT INTO "runs_toolcall"'),
    or the `nth` of all, counted from when the fault is armed. `when`:

    - before: the server never sees the commit (its backend is terminated first);
    - during: the commit reaches the server and is applied, and its answer is lost (the
      backend is terminated right after; the caller meets a real OperationalError);
    - after: the commit is answered, then the backend is terminated: the thread's next
      statement, wherever it is, meets the loss.

    Psycopg's objects are patched on this thread's connections only, and only while armed."""

    def __init__(self, when: When, *, wrote: str | None = None, nth: int = 1) -> None:
        self.when, self.wrote, self.nth = when, wrote, nth
        self.counted = 0
        self.struck: list[str] | None = None  # the statements of the commit struck
        self._statements: list[str] = []
        self._patched: list[Any] = []

    @contextlib.contextmanager
    def armed(self) -> Iterator["LoseConnection"]:
        try:
            with connection.execute_wrapper(self._watch):
                yield self
        finally:
            for raw in self._patched:
                vars(raw).pop("commit", None)
                vars(raw).pop("rollback", None)

    def _matches(self, statements: list[str]) -> bool:
        if self.struck is not None:
            return False
        if self.wrote is not None and not any(sql.startswith(self.wrote) for sql in statements):
            return False
        self.counted += 1
        return self.counted == self.nth

    def _watch(self, execute: Any, sql: str, params: Any, many: bool, context: dict[str, Any]) -> Any:
        wrapper = context["connection"]
        if wrapper.in_atomic_block:
            self._statements.append(sql)
            self._patch_commit(wrapper.connection)
            return execute(sql, params, many, context)
        if not self._matches([sql]):
            return execute(sql, params, many, context)
        self.struck = [sql]
        pid = wrapper.connection.info.backend_pid
        if self.when == "before":
            terminate([pid])
            return execute(sql, params, many, context)  # raises: the server is gone
        result = execute(sql, params, many, context)
        terminate([pid])
        if self.when == "during":
            execute("SELECT 1", None, False, context)  # raises: a real loss, its answer never came
        return result

    def _patch_commit(self, raw: psycopg.Connection) -> None:
        if "commit" in vars(raw):
            return
        commit, rollback = raw.commit, raw.rollback
        self._patched.append(raw)

        def rolled_back() -> None:
            self._statements = []  # nothing of it commits
            rollback()

        def patched() -> None:
            statements, self._statements = self._statements, []
            if not self._matches(statements):
                return commit()
            self.struck = statements
            pid = raw.info.backend_pid
            if self.when == "before":
                terminate([pid])
                return commit()  # raises: the server is gone
            commit()
            terminate([pid])
            if self.when == "during":
                raw.execute("SELECT 1")  # raises: a real loss, its answer never came
            return None

        raw.commit = patched  # type: ignore[method-assign]
        raw.rollback = rolled_back  # type: ignore[method-assign]


def lose_connection(when: When, *, wrote: str | None = None, nth: int = 1) -> contextlib.AbstractContextManager:
    """`LoseConnection(...).armed()`: a with-block within which the fault strikes once."""
    return LoseConnection(when, wrote=wrote, nth=nth).armed()
