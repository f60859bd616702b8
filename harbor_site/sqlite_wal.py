"""One idle SQLite connection held for the life of a server process (the embedded default).

SQLite checkpoints the write-ahead log into the database file and deletes it whenever the
*last* connection to the database closes, and the next connection creates the log and
its index again. Django closes a request's connection when the request ends, so on a
server nobody else holds open, every write request paid that: 15-20 ms of a 30 ms approve
(`harbor_bench --http`). With one connection always open the log stays, and SQLite's own
automatic checkpoints (every 1,000 pages, by whoever commits) keep it short. This
connection never starts a transaction, so it holds no lock and no snapshot."""

import sqlite3
import threading

from django.db import connections

_held: dict[str, sqlite3.Connection] = {}
_lock = threading.Lock()


def keep_wal_open(alias: str = "default") -> None:
    database = connections[alias].settings_dict
    if database["ENGINE"] == "django.db.backends.sqlite3" and str(database["NAME"]) not in ("", ":memory:"):
        hold(str(database["NAME"]))


def hold(path: str) -> None:
    with _lock:
        if path not in _held:
            held = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
            held.execute("SELECT count(*) FROM sqlite_master").fetchone()  # attaches the log and its index
            _held[path] = held
