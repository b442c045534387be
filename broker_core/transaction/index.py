"""The pending-transaction index: SQLite (WAL) under ``STORE/transaction/index.db``.

Derived from the log by ``catch_up`` (any process; ``BEGIN IMMEDIATE`` serialises
them and ``applied_pos`` commits with the rows, so a record is folded exactly
once) and rebuilt from it when the log was cut. It answers the console's
queries and the check's "which halves are due": a range scan of
``(state, due_at)``, so a check over a million halves not yet due reads nothing.
The state table (``statetable.py``), not this index, decides outcomes.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from broker_core.errors import ValidationError
from broker_core.sqlite_wal import connect_wal, set_aside
from broker_core.store import MessageStore
from broker_core.transaction import records as R
from broker_core.transaction import statetable as S
from broker_core.transaction.fold import Folder

log = logging.getLogger(__name__)

SCHEMA_VERSION = 2

#: SQLite's integers are signed 64-bit: a bigger number is an
#: ``OverflowError`` of the driver, not an answer.
_INT_MAX = (1 << 63) - 1


def _int_arg(name: str, value: Any, low: int = 0, high: int = _INT_MAX) -> int:
    """``value`` as a query's integer argument, refused (``ValidationError``,
    400) unless it is an integer within ``low..high`` (SQLite's own range at
    most), so that a page far beyond the end is a caller's error, not the
    driver's overflow."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValidationError(f"{name} must be an integer, not {value!r}")
    if not low <= value <= high:
        raise ValidationError(f"{name} must be within {low}..{high}, not {value}")
    return value


_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS halves(
  half_offset INTEGER PRIMARY KEY,
  queue_offset INTEGER NOT NULL,
  msg_id TEXT,
  producer_group TEXT NOT NULL,
  topic TEXT NOT NULL,
  queue_id INTEGER NOT NULL,
  tags TEXT,
  keys TEXT,
  born_ts INTEGER NOT NULL,
  check_count INTEGER NOT NULL DEFAULT 0,
  last_check_at INTEGER,
  due_at INTEGER NOT NULL,
  state INTEGER NOT NULL,
  outcome_at INTEGER,
  outcome_source TEXT,
  operator TEXT,
  commit_offset INTEGER,
  discard_reason TEXT
);
CREATE INDEX IF NOT EXISTS halves_due ON halves(state, due_at);
CREATE INDEX IF NOT EXISTS halves_state_born ON halves(state, born_ts);
CREATE INDEX IF NOT EXISTS halves_group ON halves(producer_group, state, born_ts);
CREATE INDEX IF NOT EXISTS halves_topic ON halves(topic, state, born_ts);
CREATE INDEX IF NOT EXISTS halves_checks ON halves(state, check_count, born_ts);
CREATE TABLE IF NOT EXISTS half_keys(
  key TEXT NOT NULL, half_offset INTEGER NOT NULL, PRIMARY KEY(key, half_offset)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS events(
  log_offset INTEGER PRIMARY KEY,
  half_offset INTEGER NOT NULL,
  at INTEGER NOT NULL,
  kind TEXT NOT NULL,
  source TEXT, operator TEXT, transport TEXT, target TEXT, answer TEXT,
  latency_ms REAL, check_no INTEGER, detail TEXT
);
CREATE INDEX IF NOT EXISTS events_half ON events(half_offset, log_offset);
CREATE TABLE IF NOT EXISTS counters(name TEXT PRIMARY KEY, value INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS group_counts(
  producer_group TEXT NOT NULL, state INTEGER NOT NULL, n INTEGER NOT NULL,
  PRIMARY KEY(producer_group, state)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS topic_counts(
  topic TEXT NOT NULL, state INTEGER NOT NULL, n INTEGER NOT NULL,
  PRIMARY KEY(topic, state)
) WITHOUT ROWID;
"""

_SORTS = {
    "born": "h.born_ts, h.half_offset",
    "-born": "h.born_ts DESC, h.half_offset DESC",
    "checks": "h.check_count, h.born_ts, h.half_offset",
    "-checks": "h.check_count DESC, h.born_ts DESC, h.half_offset DESC",
    "last_check": "h.last_check_at, h.half_offset",
    "-last_check": "h.last_check_at DESC, h.half_offset DESC",
    "next_check": "h.due_at, h.half_offset",
    "-next_check": "h.due_at DESC, h.half_offset DESC",
}

COLUMNS = (
    "h.half_offset, h.queue_offset, h.msg_id, h.producer_group, h.topic, h.queue_id, "
    "h.tags, h.keys, h.born_ts, h.check_count, h.last_check_at, h.due_at, h.state, "
    "h.outcome_at, h.outcome_source, h.operator, h.commit_offset, h.discard_reason"
)


class PendingIndex:
    """The SQLite index; one connection per thread."""

    def __init__(
        self, store: MessageStore, transaction_timeout_ms: int, check_interval_ms: int
    ) -> None:
        self.store = store
        self.path = Path(store.root) / "transaction" / "index.db"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.timeout_ms = transaction_timeout_ms
        self.interval_ms = check_interval_ms
        self._local = threading.local()
        self._conns: list[sqlite3.Connection] = []
        self._conns_lock = threading.Lock()
        try:
            self._open_schema()
        except sqlite3.DatabaseError as exc:
            if isinstance(exc, sqlite3.OperationalError) and "locked" in str(exc):
                raise
            # Derived from the log: a damaged file is set aside and the index
            # folded again from the log (it was "database disk image is
            # malformed" at every open, and the store's transactions down).
            self.close()
            aside = set_aside(self.path)
            log.error(
                "transaction index %s is damaged (%s): set aside as %s, "
                "rebuilding it from the log",
                self.path, exc, aside,
            )  # fmt: skip
            self._open_schema()

    def _open_schema(self) -> None:
        conn = self.conn()
        conn.execute("PRAGMA schema_version").fetchone()  # reads the header
        with conn:
            conn.executescript(_SCHEMA)
            v = conn.execute("SELECT value FROM meta WHERE key='schema'").fetchone()
            if v is not None and int(v[0]) != SCHEMA_VERSION:
                # Written by another version: derived data, so start again.
                self._clear(conn)
                conn.execute("DELETE FROM meta WHERE key='schema'")
                v = None
            if v is None:
                conn.execute(
                    "INSERT OR IGNORE INTO meta VALUES ('schema', ?)", (SCHEMA_VERSION,)
                )
                conn.execute("INSERT OR IGNORE INTO meta VALUES ('applied_pos', 0)")

    def conn(self) -> sqlite3.Connection:
        c: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if c is None:
            c = connect_wal(self.path, 60, check_same_thread=False)
            c.execute("PRAGMA synchronous=NORMAL")
            c.execute("PRAGMA cache_size=-65536")
            c.execute("PRAGMA temp_store=MEMORY")
            self._local.conn = c
            with self._conns_lock:
                self._conns.append(c)
        return c

    def close(self) -> None:
        with self._conns_lock:
            for c in self._conns:
                try:
                    c.close()
                except sqlite3.Error:
                    pass
            self._conns.clear()
        self._local = threading.local()

    @property
    def applied_pos(self) -> int:
        row = (
            self.conn()
            .execute("SELECT value FROM meta WHERE key='applied_pos'")
            .fetchone()
        )
        return int(row[0]) if row else 0

    # -- building ------------------------------------------------------------
    def catch_up(self, deadline: float | None = None, batch: int = 20000) -> int:
        """Fold log records into the index until the log's end (or ``deadline``,
        a ``time.monotonic()`` value); return how many records were read."""
        total = 0
        while True:
            n, done = self._catch_up_batch(batch)
            total += n
            if done or (deadline is not None and time.monotonic() > deadline):
                return total

    def rebuild(self) -> int:
        """Drop everything and fold the whole log again."""
        c = self.conn()
        c.execute("BEGIN IMMEDIATE")
        try:
            self._clear(c)
            c.execute("COMMIT")
        except BaseException:
            c.execute("ROLLBACK")
            raise
        return self.catch_up()

    @staticmethod
    def _clear(c: sqlite3.Connection) -> None:
        for t in (
            "halves",
            "half_keys",
            "events",
            "counters",
            "topic_counts",
            "group_counts",
        ):
            c.execute(f"DELETE FROM {t}")
        c.execute("UPDATE meta SET value=0 WHERE key='applied_pos'")

    def _catch_up_batch(self, batch: int) -> tuple[int, bool]:
        store = self.store
        c = self.conn()
        target = store.max_physical_offset()
        if self.applied_pos >= target:
            return 0, True
        c.execute("BEGIN IMMEDIATE")
        try:
            pos = int(
                c.execute("SELECT value FROM meta WHERE key='applied_pos'").fetchone()[
                    0
                ]
            )
            if pos > target:
                self._clear(c)
                pos = 0
            folder = Folder(c, self.timeout_ms, self.interval_ms)
            n = 0
            end = pos
            for req in store.iter_dispatch(pos, target):
                ev = R.classify(req)
                if ev is not None:
                    folder.fold(ev)
                end = req.next_offset
                n += 1
                if n >= batch:
                    break
            else:
                end = max(end, target)
            folder.finish()
            c.execute("UPDATE meta SET value=? WHERE key='applied_pos'", (end,))
            c.execute("COMMIT")
        except BaseException:
            c.execute("ROLLBACK")
            raise
        return n, end >= target

    # -- queries -------------------------------------------------------------
    def query(
        self, sql: str, args: tuple[Any, ...] | list[Any] = ()
    ) -> list[tuple[Any, ...]]:
        return self.conn().execute(sql, args).fetchall()

    def list_halves(
        self,
        states: list[int] | None,
        producer_group: str | None,
        topic: str | None,
        key: str | None,
        born_before: int | None,
        min_checks: int | None,
        sort: str,
        limit: int,
        offset: int,
        count_total: bool,
        total_limit: int = 100_000,
    ) -> tuple[list[tuple[Any, ...]], int | None, bool]:
        """Return matching rows (``COLUMNS`` order) and the total (if asked)."""
        if sort not in _SORTS:
            raise ValueError(f"sort must be one of {', '.join(_SORTS)}")
        limit = _int_arg("limit", limit)
        offset = _int_arg("offset", offset)
        total_limit = _int_arg("total_limit", total_limit, high=_INT_MAX - 1)
        if born_before is not None:
            born_before = _int_arg("born_before", born_before, low=-_INT_MAX)
        if min_checks is not None:
            min_checks = _int_arg("min_checks", min_checks, low=-_INT_MAX)
        frm = "FROM halves h"
        where: list[str] = []
        args: list[Any] = []
        if key:
            # Keys are selective (order ids): start from the key, then sort.
            frm = (
                "FROM half_keys k CROSS JOIN halves h ON k.half_offset = h.half_offset"
            )
            where.append("k.key = ?")
            args.append(key)
        if states:
            where.append(f"h.state IN ({','.join('?' * len(states))})")
            args.extend(states)
        if producer_group:
            where.append("h.producer_group = ?")
            args.append(producer_group)
        if topic:
            where.append("h.topic = ?")
            args.append(topic)
        if born_before is not None:
            where.append("h.born_ts <= ?")
            args.append(born_before)
        if min_checks:
            where.append("h.check_count >= ?")
            args.append(min_checks)
        cond = (" WHERE " + " AND ".join(where)) if where else ""
        c = self.conn()
        rows = c.execute(
            f"SELECT {COLUMNS} {frm}{cond} ORDER BY {_SORTS[sort]} LIMIT ? OFFSET ?",
            (*args, limit, offset),
        ).fetchall()
        total = None
        capped = False
        if count_total:
            if not (
                key or producer_group or topic or born_before is not None or min_checks
            ):
                # State only: the per-topic gauges answer without a scan.
                row = c.execute(
                    "SELECT COALESCE(SUM(n), 0) FROM topic_counts"
                    + (
                        f" WHERE state IN ({','.join('?' * len(states))})"
                        if states
                        else ""
                    ),
                    states or [],
                ).fetchone()
                total = int(row[0])
            else:
                # Counting a million rows takes a while: stop at total_limit.
                total = int(
                    c.execute(
                        f"SELECT COUNT(*) FROM (SELECT 1 {frm}{cond} LIMIT ?)",
                        (*args, total_limit + 1),
                    ).fetchone()[0]
                )
                if total > total_limit:
                    total, capped = total_limit, True
        return rows, total, capped

    def get_row(self, half_offset: int) -> tuple[Any, ...] | None:
        half_offset = _int_arg("half_offset", half_offset, low=-_INT_MAX)
        return (
            self.conn()
            .execute(
                f"SELECT {COLUMNS} FROM halves h WHERE h.half_offset = ?",
                (half_offset,),
            )
            .fetchone()
        )

    def events(self, half_offset: int) -> list[tuple[Any, ...]]:
        half_offset = _int_arg("half_offset", half_offset, low=-_INT_MAX)
        return (
            self.conn()
            .execute(
                "SELECT at, kind, source, operator, transport, target, answer, "
                "latency_ms, "
                "check_no, detail, log_offset FROM events WHERE half_offset = ? "
                # In time order: a check's record is written once it is
                # answered, after the outcome its answer led to (a producer
                # commits, then the check returns), but it happened first (its
                # time is when it was sent); within a millisecond, log order.
                "ORDER BY at, log_offset",
                (half_offset,),
            )
            .fetchall()
        )

    def iter_due(self, now_ms: int, batch: int = 512) -> Iterator[tuple[Any, ...]]:
        """Yield pending halves due by ``now_ms`` in (due_at, half_offset) order."""
        now_ms = _int_arg("now_ms", int(now_ms), low=-_INT_MAX)
        batch = _int_arg("batch", int(batch), low=1)
        after = (-(1 << 62), -1)
        c = self.conn()
        while True:
            rows = c.execute(
                "SELECT due_at, half_offset, queue_offset, producer_group, topic, "
                "born_ts "
                "FROM halves WHERE state = ? AND due_at <= ? "
                "AND (due_at, half_offset) > (?, ?) "
                "ORDER BY due_at, half_offset LIMIT ?",
                (S.PENDING, now_ms, after[0], after[1], batch),
            ).fetchall()
            if not rows:
                return
            yield from rows
            after = (rows[-1][0], rows[-1][1])

    def counters(self) -> dict[str, int]:
        return {
            k: int(v)
            for k, v in self.conn().execute("SELECT name, value FROM counters")
        }

    def group_counts(self) -> list[tuple[str, int, int]]:
        """Return ``(producer_group, state, halves)`` for every non-empty gauge."""
        return [
            (g, int(s), int(n))
            for g, s, n in self.conn().execute(
                "SELECT producer_group, state, n FROM group_counts WHERE n != 0"
            )
        ]

    def topic_counts(self) -> list[tuple[str, int, int]]:
        return [
            (t, int(s), int(n))
            for t, s, n in self.conn().execute(
                "SELECT topic, state, n FROM topic_counts WHERE n != 0"
            )
        ]
