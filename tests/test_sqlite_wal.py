"""The embedded server holds one SQLite connection open, so a request closing its own is
never the last one (which would checkpoint and delete the write-ahead log every time)."""

import os
import sqlite3
import time

from harbor_site.sqlite_wal import hold


def _write_and_close(path: str) -> None:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE IF NOT EXISTS t (x)")
    conn.execute("INSERT INTO t VALUES (1)")
    conn.close()


def test_the_write_ahead_log_outlives_a_request_connection(tmp_path):
    alone, held = str(tmp_path / "alone.sqlite3"), str(tmp_path / "held.sqlite3")
    _write_and_close(alone)
    assert not (tmp_path / "alone.sqlite3-wal").exists()  # the last close checkpointed and deleted it
    _write_and_close(held)
    hold(held)
    _write_and_close(held)
    assert (tmp_path / "held.sqlite3-wal").exists()
    assert sqlite3.connect(held).execute("SELECT count(*) FROM t").fetchone() == (2,)


def test_the_held_connection_checkpoints_the_log_so_commits_need_not(tmp_path):
    path = str(tmp_path / "busy.sqlite3")
    writer = sqlite3.connect(path, isolation_level=None)
    writer.execute("PRAGMA journal_mode=WAL")
    writer.execute("PRAGMA wal_autocheckpoint=10000")  # the backstop the settings give requests
    writer.execute("CREATE TABLE t (x)")
    for _ in range(1500):  # 1,500 commits of a page each: SQLite alone would checkpoint at 1,000
        writer.execute("INSERT INTO t VALUES (zeroblob(4000))")
    assert os.path.getsize(path) < 100_000  # every page is still in the log: no commit copied it back

    hold(path)
    deadline = time.monotonic() + 5
    while os.path.getsize(path) < 1500 * 4000 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert os.path.getsize(path) >= 1500 * 4000  # the server's thread copied the log into the file
    assert writer.execute("SELECT count(*) FROM t").fetchone() == (1500,)
