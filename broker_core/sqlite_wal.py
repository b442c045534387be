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

import logging
import sqlite3
import time
from pathlib import Path

#: between tries of the WAL switch
RETRY_S = 0.02
#: The store's SQLite files, each with what setting it aside costs (none is
#: the truth: the log and the consumer offsets are).
SET_ASIDE_COST = {
    Path("transaction") / "index.db": "derived from the log, it is rebuilt",
    Path("grpc") / "pop.db": (
        "the endpoint's pop state: receives start again at each group's "
        "committed offset, messages in flight are delivered again"
    ),
    Path("grpc") / "sends.db": (
        "recent client message ids: a retry of a send made before the damage "
        "may be stored twice"
    ),
}

log = logging.getLogger(__name__)


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


def is_damage(exc: BaseException) -> bool:
    """Whether ``exc`` says the database file itself is damaged ("database
    disk image is malformed", "file is not a database"), as opposed to busy,
    locked, full or unreachable: only damage is cured by setting it aside."""
    return isinstance(exc, sqlite3.DatabaseError) and getattr(
        exc, "sqlite_errorcode", None
    ) in (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB)


def damage(path: Path) -> str | None:
    """What SQLite's own check (``quick_check``, read-only) says is wrong with
    the database at ``path``, or None if it is intact or absent."""
    if not Path(path).exists():
        return None
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30)
        try:
            rows = db.execute("PRAGMA quick_check").fetchall()
        finally:
            db.close()
    except sqlite3.DatabaseError as exc:
        return str(exc)
    if rows != [("ok",)]:
        return "; ".join(str(r[0]) for r in rows[:3])
    return None


def set_aside(path: Path) -> Path:
    """Move a damaged SQLite file (with its WAL and shared-memory files) out of
    the way, beside it as ``<name>.damaged-<ms>``; return that path."""
    stamp = int(time.time() * 1000)
    aside = path.with_name(f"{path.name}.damaged-{stamp}")
    for suffix in ("", "-wal", "-shm"):
        src = path.with_name(path.name + suffix)
        if src.exists():
            src.rename(aside.with_name(aside.name + suffix))
    return aside


def set_aside_if_damaged(path: Path, found: str, cost: str) -> bool:
    r"""Check ``path`` and, if SQLite finds it damaged, set it aside and log
    what was ``found`` (how the damage showed), where the file went and what
    that ``cost``\ s; with an exclusive lock on ``<path>.lock`` so that of
    several processes finding the damage at once only the first moves the
    file (the others then find the new, intact one). True if it was moved."""
    import fcntl

    with open(path.with_name(path.name + ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        why = damage(path)
        if why is None:
            return False
        aside = set_aside(path)
    log.error(
        "%s is damaged (%s; %s): set aside as %s; %s", path, found, why, aside, cost
    )
    return True
