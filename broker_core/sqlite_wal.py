"""Opening the store's SQLite files (transaction index, pop state, retried
sends) in WAL mode from several processes at once.

A new database switches to WAL under an exclusive lock, and SQLite answers
"database is locked" at once to a second process switching it at the same
moment: its busy handler is not consulted for that. Two endpoint workers
starting on a new store did exactly that, and one of them exited. So the
switch is retried until ``timeout`` runs out; once the file is in WAL mode
(it stays so) the pragma takes no lock worth waiting for.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

#: between tries of the WAL switch
RETRY_S = 0.02


def connect_wal(
    path: Path | str,
    timeout: float = 30.0,
    *,
    page_size: int | None = None,
    check_same_thread: bool = True,
) -> sqlite3.Connection:
    """A connection to ``path`` in autocommit mode, its journal in WAL mode,
    waiting up to ``timeout`` seconds for other processes' locks."""
    db = sqlite3.connect(
        path,
        timeout=timeout,
        isolation_level=None,
        check_same_thread=check_same_thread,
    )
    try:
        if page_size is not None:
            # Only a new database takes it: WAL fixes the page size.
            db.execute(f"PRAGMA page_size={int(page_size)}")
        end = time.monotonic() + timeout
        while True:
            try:
                db.execute("PRAGMA journal_mode=WAL")
                break
            except sqlite3.OperationalError as e:
                if "locked" not in str(e) or time.monotonic() >= end:
                    raise
                time.sleep(RETRY_S)
    except BaseException:
        db.close()
        raise
    return db
