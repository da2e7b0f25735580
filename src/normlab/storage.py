"""SQLite files that several processes open at once: the lab's progress and kept answers, a
sweep's results.

Each of those files is in WAL mode (readers never wait for a writer). Turning a new file to
WAL takes an exclusive lock, and SQLite takes it by upgrading the read lock it already holds.
When two processes do that at the same moment (two labs started together, two test workers,
two sweeps pointed at one new store), SQLite answers one of them "database is locked" at once,
without calling its busy handler: waiting while holding a read lock could deadlock. The mode
is written into the file, so the same request made again once the other process is done finds
the file already in WAL mode. :func:`enter_wal` makes that request again until it succeeds or
the busy timeout has passed.
"""

from __future__ import annotations

import sqlite3
import time


def enter_wal(db: sqlite3.Connection, timeout_s: float) -> str:
    """Put ``db``'s file in WAL mode, trying again while another process holds the lock, for
    at most ``timeout_s`` seconds; return the journal mode SQLite reports (``"wal"``, or
    ``"memory"`` for an in-memory database).

    Raises the last :class:`sqlite3.OperationalError` once ``timeout_s`` has passed, and any
    other error at once.
    """
    deadline = time.monotonic() + timeout_s
    pause = 0.001  # doubled after each refusal, up to 0.1 s: the other's switch takes ms
    while True:
        try:
            return str(db.execute("PRAGMA journal_mode = WAL").fetchone()[0])
        except sqlite3.OperationalError as exc:
            code = getattr(exc, "sqlite_errorcode", 0)  # an extended code: BUSY in its low byte
            busy = code & 0xFF == sqlite3.SQLITE_BUSY
            if not busy or time.monotonic() + pause > deadline:
                raise
        time.sleep(pause)
        pause = min(2 * pause, 0.1)
