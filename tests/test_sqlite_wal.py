"""The embedded server holds one SQLite connection open, so a request closing its own is
never the last one (which would checkpoint and delete the write-ahead log every time)."""

import sqlite3

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
