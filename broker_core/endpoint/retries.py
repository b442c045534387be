"""Client message ids sent recently, shared by the workers of ``serve
--workers N`` (``<store>/grpc/sends.db``), so that a retried send is
recognised whichever worker it reaches: a client whose connection broke (its
worker was killed mid-send) reconnects, most likely to another worker, and
sends again with the same id.

One row per (topic, id): the queue offset of the first send and when. Rows
are added after the append (in one transaction per batch, on the writer
thread) and pruned once out of the window, so a retry that arrives within
milliseconds of its first send, on another worker, can still be stored
twice; within one worker ``RecentSends`` in memory sees it at once.
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

from broker_core.sqlite_wal import (
    SET_ASIDE_COST,
    connect_wal,
    is_damage,
    set_aside_if_damaged,
)

SCHEMA = """
CREATE TABLE IF NOT EXISTS sends (
    topic TEXT NOT NULL, msg_id TEXT NOT NULL,
    queue_offset INTEGER NOT NULL, at INTEGER NOT NULL,
    PRIMARY KEY (topic, msg_id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS sends_at ON sends (at);
"""


class SharedSends:
    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        #: a connection per thread (the event loop's look-ups, the writer's)
        self._local = threading.local()
        self._pruned_ms = 0
        #: bumped when the file is set aside: each thread then reconnects
        self._generation = 0
        self._recover_lock = threading.Lock()
        self._cost = SET_ASIDE_COST[Path("grpc") / "sends.db"]
        set_aside_if_damaged(path, "found damaged at open", self._cost)
        try:
            self._db()
        except sqlite3.DatabaseError as exc:
            if not self._recover(exc):
                raise
            self._db()

    def _db(self) -> sqlite3.Connection:
        db = getattr(self._local, "db", None)
        if db is None or self._local.generation != self._generation:
            self._local.generation = self._generation
            db = connect_wal(self.path, 30)
            db.execute("PRAGMA synchronous=NORMAL")
            db.executescript(SCHEMA)
            self._local.db = db
        return db

    def _recover(self, exc: BaseException) -> bool:
        """A damaged file (``exc`` says so) is set aside and a new one started:
        these rows only recognise retries, the log holds the messages. True if
        so (worth a retry)."""
        if not is_damage(exc):
            return False
        with self._recover_lock:
            set_aside_if_damaged(self.path, str(exc), self._cost)
            self._generation += 1
        return True

    def find(self, topic: str, msg_id: str, since_ms: int) -> int | None:
        """The queue offset of a send of ``msg_id`` since ``since_ms``, or None
        (a read: never waits for a writer; None too if the file was damaged)."""
        try:
            row = (
                self._db()
                .execute(
                    "SELECT queue_offset FROM sends "
                    "WHERE topic=? AND msg_id=? AND at>=?",
                    (topic, msg_id, since_ms),
                )
                .fetchone()
            )
        except sqlite3.DatabaseError as exc:
            if not self._recover(exc):
                raise
            return None
        return None if row is None else row[0]

    def remember(self, rows: list[tuple[str, str, int, int]], before_ms: int) -> None:
        """Add (topic, id, queue offset, at ms) rows; drop those older than
        ``before_ms`` (at most once a second)."""
        try:
            self._remember(rows, before_ms)
        except sqlite3.DatabaseError as exc:
            if not self._recover(exc):
                raise
            self._remember(rows, before_ms)

    def _remember(self, rows: list[tuple[str, str, int, int]], before_ms: int) -> None:
        db = self._db()
        db.execute("BEGIN IMMEDIATE")
        try:
            db.executemany("INSERT OR IGNORE INTO sends VALUES (?,?,?,?)", rows)
            if before_ms - self._pruned_ms >= 1000:
                db.execute("DELETE FROM sends WHERE at < ?", (before_ms,))
                self._pruned_ms = before_ms
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")
