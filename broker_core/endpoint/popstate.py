"""The pop state's SQLite file (``<store>/grpc/pop.db``): its connections,
their set-up, one write transaction at a time, checkpoints, and recovery from
a damaged or replaced file. ``pop.PopManager`` keeps its rows in it (the
module doc of ``pop.py`` says what they are and why SQLite in WAL mode)."""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from broker_core.errors import Busy, StorageIOError, StoreError
from broker_core.sqlite_wal import (
    SET_ASIDE_COST,
    connect_wal,
    is_damage,
    set_aside_if_damaged,
)

DB_NAME = Path("grpc") / "pop.db"

log = logging.getLogger("broker_core.endpoint.pop")

SCHEMA = """
CREATE TABLE IF NOT EXISTS queues (
    grp TEXT NOT NULL, topic TEXT NOT NULL, qid INTEGER NOT NULL,
    cursor INTEGER NOT NULL,     -- next offset not yet read
    committed INTEGER NOT NULL,  -- low-water mark last committed to the store
    PRIMARY KEY (grp, topic, qid)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS pending (
    grp TEXT NOT NULL, topic TEXT NOT NULL, qid INTEGER NOT NULL,
    off INTEGER NOT NULL,
    attempts INTEGER NOT NULL,
    visible_at INTEGER NOT NULL, -- ms; in flight while in the future
    nonce INTEGER NOT NULL,      -- the current receipt handle's
    mgroup TEXT,                 -- FIFO message group
    PRIMARY KEY (grp, topic, qid, off)
) WITHOUT ROWID;
"""


def now_ms() -> int:
    """The wall clock in milliseconds, as the pop state's times are kept."""
    return int(time.time() * 1000)


@contextlib.contextmanager
def busy_as(wait: bool) -> Iterator[None]:
    """Turn SQLite's "database is locked" into ``Busy`` (``wait=False``)."""
    try:
        yield
    except sqlite3.OperationalError as exc:
        if not wait and exc.sqlite_errorcode == sqlite3.SQLITE_BUSY:
            raise Busy(str(exc)) from exc
        raise


class PopState:
    """``pop.db`` of one store, opened on first use.

    ``on_open`` runs each time the file is (re)opened (the manager applies
    the offset resets waiting for it); ``on_drop`` when the connections are
    dropped for a damaged or replaced file (the manager forgets what it knew
    of the old one)."""

    def __init__(
        self,
        root: Path,
        on_open: Callable[[], object] = lambda: None,
        on_drop: Callable[[], object] = lambda: None,
    ) -> None:
        self.path = root / DB_NAME
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.on_open = on_open
        self.on_drop = on_drop
        #: (db, db_nowait, checkpointer) once ``pop.db`` is open: see ``_ensure``
        self._conns: tuple[sqlite3.Connection, ...] | None = None
        #: the open file's inode (``replaced``); whether it was checked
        self._ino = -1
        self._checked = False

    def open(self) -> tuple[sqlite3.Connection, ...]:
        """The open connections, opening ``pop.db`` first if it is not yet
        (``StoreError`` while it cannot be: no room for it or its WAL)."""
        conns = self._conns
        if conns is not None:
            return conns
        if not self._checked:
            # Once per process, before the first connection: a damaged file
            # (a torn page, zeros) failed every receive of every group.
            self._set_aside_if_damaged("found damaged at open")
            self._checked = True
        try:
            conns = self._open()
        except sqlite3.DatabaseError as exc:
            if not is_damage(exc):
                raise
            self._set_aside_if_damaged(str(exc))
            conns = self._open()
        self._conns = conns
        self.on_open()
        return conns

    def _open(self) -> tuple[sqlite3.Connection, ...]:
        opened: list[sqlite3.Connection] = []
        try:
            opened.append(self._connect(timeout=30))
            opened[0].executescript(SCHEMA)
            # for callers that must not wait (the event loop's acks): ``Busy``
            # at once while another process holds the write lock
            opened.append(self._connect(timeout=0))
            opened.append(self._connect(timeout=30))
        except sqlite3.OperationalError as exc:
            for db in opened:
                db.close()
            raise StorageIOError(
                f"pop state {self.path} cannot be opened: {exc}"
            ) from exc
        except BaseException:
            for db in opened:
                db.close()
            raise
        self._ino = os.stat(self.path).st_ino
        return tuple(opened)

    def _set_aside_if_damaged(self, found: str) -> None:
        set_aside_if_damaged(self.path, found, SET_ASIDE_COST[DB_NAME])

    def recover(self, exc: BaseException) -> bool:
        """After ``exc`` from the pop state: if it says the file is damaged,
        set the file aside (unless another process did already) and start a
        fresh one; True if so and the call is worth retrying. The connections
        are dropped, not closed: the checkpoint thread may be using one."""
        if not is_damage(exc):
            return False
        self._drop()
        self._set_aside_if_damaged(str(exc))
        return True

    def _drop(self) -> None:
        self._conns = None
        self.on_drop()

    def replaced(self) -> bool:
        """Whether ``pop.db`` is another file than the one open here (set
        aside by another process): then this one reopens it, instead of
        popping from the old file while the others use the new one."""
        if self._conns is None:
            return False
        try:
            ino = os.stat(self.path).st_ino
        except FileNotFoundError:
            ino = -1
        if ino == self._ino:
            return False
        log.warning("pop state %s replaced by another process: reopening", self.path)
        self._drop()
        return True

    def available(self) -> bool:
        """Whether ``pop.db`` is open (trying to open it if not, or again if
        another process replaced it); the background work (resets, offsets,
        checkpoints, stats) waits for it."""
        self.replaced()
        try:
            self.open()
        except StoreError:
            return False
        return True

    @property
    def is_open(self) -> bool:
        """Whether the file is open (never opens it)."""
        return self._conns is not None

    @property
    def db(self) -> sqlite3.Connection:
        return self.open()[0]

    @property
    def db_nowait(self) -> sqlite3.Connection:
        return self.open()[1]

    def _connect(self, timeout: float) -> sqlite3.Connection:
        # Autocommit (explicit transactions); used by one thread at a time.
        # Set up waiting for the lock whatever ``timeout`` (another worker
        # may be writing); ``timeout`` applies to what follows.
        # Small pages (for a new database; WAL fixes the size): an ack's
        # commit writes one whole page to the WAL, 1 KiB costs less than 4.
        db = connect_wal(self.path, 30, page_size=1024, check_same_thread=False)
        # A commit is written to the WAL, not fsynced: it survives the
        # process, not the machine (as the store's async flush).
        db.execute("PRAGMA synchronous=NORMAL")
        # Checkpoints (with their fsyncs) run from ``checkpoint``, off the
        # threads that pop and acknowledge.
        db.execute("PRAGMA wal_autocheckpoint=0")
        db.execute(f"PRAGMA busy_timeout={int(timeout * 1000)}")
        return db

    def close(self) -> None:
        for db in self._conns or ():
            db.close()
        self._conns = None

    @contextlib.contextmanager
    def write(self, wait: bool = True) -> Iterator[sqlite3.Connection]:
        """One write transaction; with ``wait=False``, ``Busy`` at once if
        another process holds the lock (for callers that must not block)."""
        db = self.db if wait else self.db_nowait
        with busy_as(wait):
            db.execute("BEGIN IMMEDIATE")
        try:
            yield db
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")

    def checkpoint(self) -> None:
        """Copy the WAL into the database file (a passive checkpoint: never
        waits for, nor blocks, the other connections). On its own connection,
        so that it runs on any one thread beside the pops."""
        conns = self._conns  # never opens nor reopens it (the pop thread does)
        if conns is not None:
            conns[2].execute("PRAGMA wal_checkpoint(PASSIVE)")
