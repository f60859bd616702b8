"""One idle SQLite connection held for the life of a server process (the embedded default),
and the write-ahead log checkpointed through it, off the commit path.

SQLite checkpoints the write-ahead log into the database file and deletes it whenever the
*last* connection to the database closes, and the next connection creates the log and
its index again. When each request closed its connection at its end, every write request
on a server nobody else held open paid that, a large share of an approve (`bin/bench
--http`). Request threads keep theirs now (harbor_site.request_threads), but any of them may
close one (an error, its age); with this connection always open the log stays whatever they
do. This connection never starts a transaction, so it holds no lock and no snapshot.

Left to itself, SQLite checkpoints in the commit that takes the log past 1,000 pages: that
request copies the pages back and syncs the file, many times a commit's cost. The
held connection's thread checkpoints instead (passive: it waits for no reader or writer)
every half second, and request connections checkpoint only past a backstop the thread
keeps them from reaching (`PRAGMA wal_autocheckpoint`, settings)."""

import logging
import sqlite3
import threading
import time

from django.db import connections

log = logging.getLogger("harbor.sqlite")

CHECKPOINT_SECONDS = 0.5

_held: dict[str, sqlite3.Connection] = {}
_lock = threading.Lock()


def keep_wal_open(alias: str = "default") -> None:
    database = connections[alias].settings_dict
    if connections[alias].vendor == "sqlite" and str(database["NAME"]) not in ("", ":memory:"):
        hold(str(database["NAME"]))


def hold(path: str) -> None:
    with _lock:
        if path not in _held:
            held = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
            held.execute("SELECT count(*) FROM sqlite_master").fetchone()  # attaches the log and its index
            _held[path] = held
            threading.Thread(
                target=_checkpoint_forever, args=(held,), name="harbor-wal-checkpoint", daemon=True
            ).start()


def _checkpoint_forever(held: sqlite3.Connection) -> None:
    while True:
        time.sleep(CHECKPOINT_SECONDS)
        try:
            held.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()  # copies what no reader still needs
        except sqlite3.Error:
            log.warning("checkpoint of the write-ahead log failed; the next one tries again", exc_info=True)
