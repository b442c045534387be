"""The pending-transaction index: SQLite (WAL) under ``STORE/transaction/index.db``.

Derived from the log by ``catch_up`` (any process; ``BEGIN IMMEDIATE`` serialises
them and ``applied_pos`` commits with the rows, so a record is folded exactly
once) and rebuilt from it when the log was cut. It answers the console's
queries and the check's "which halves are due": a range scan of
``(state, due_at)``, so a check over a million halves not yet due reads nothing.
The state table (``statetable.py``), not this index, decides outcomes.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from broker_core.message import (
    PROPERTY_KEYS,
    PROPERTY_PRODUCER_GROUP,
    PROPERTY_REAL_QID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
)
from broker_core.store import MessageStore
from broker_core.transaction import records as R
from broker_core.transaction import statetable as S

SCHEMA_VERSION = 1
#: Upper bounds (ms) of the half-to-outcome histogram; -1 is +inf.
LATENCY_BUCKETS = (10, 50, 100, 500, 1000, 5000, 10000, 60000, 300000, 3600000, -1)

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
CREATE INDEX IF NOT EXISTS halves_msg_id ON halves(msg_id);
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


def _latency_bucket(ms: int) -> int:
    for b in LATENCY_BUCKETS:
        if b < 0 or ms <= b:
            return b
    return -1


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
        conn = self.conn()
        with conn:
            conn.executescript(_SCHEMA)
            v = conn.execute("SELECT value FROM meta WHERE key='schema'").fetchone()
            if v is None:
                conn.execute(
                    "INSERT OR IGNORE INTO meta VALUES ('schema', ?)", (SCHEMA_VERSION,)
                )
                conn.execute("INSERT OR IGNORE INTO meta VALUES ('applied_pos', 0)")

    def conn(self) -> sqlite3.Connection:
        c: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if c is None:
            c = sqlite3.connect(
                self.path, timeout=60, isolation_level=None, check_same_thread=False
            )
            c.execute("PRAGMA journal_mode=WAL")
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
        for t in ("halves", "half_keys", "events", "counters", "topic_counts"):
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
            folder = _Folder(c, self.timeout_ms, self.interval_ms)
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
    ) -> tuple[list[tuple[Any, ...]], int | None]:
        """Return matching rows (``COLUMNS`` order) and the total (if asked)."""
        if sort not in _SORTS:
            raise ValueError(f"sort must be one of {', '.join(_SORTS)}")
        frm = "FROM halves h"
        where: list[str] = []
        args: list[Any] = []
        if key:
            frm += " JOIN half_keys k ON k.half_offset = h.half_offset AND k.key = ?"
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
        if count_total:
            total = int(c.execute(f"SELECT COUNT(*) {frm}{cond}", args).fetchone()[0])
        return rows, total

    def get_row(self, half_offset: int) -> tuple[Any, ...] | None:
        return (
            self.conn()
            .execute(
                f"SELECT {COLUMNS} FROM halves h WHERE h.half_offset = ?",
                (half_offset,),
            )
            .fetchone()
        )

    def find_by_msg_id(self, msg_id: str) -> int | None:
        row = (
            self.conn()
            .execute(
                "SELECT half_offset FROM halves WHERE msg_id = ? ORDER BY half_offset DESC LIMIT 1",
                (msg_id,),
            )
            .fetchone()
        )
        return None if row is None else int(row[0])

    def events(self, half_offset: int) -> list[tuple[Any, ...]]:
        return (
            self.conn()
            .execute(
                "SELECT at, kind, source, operator, transport, target, answer, latency_ms, "
                "check_no, detail, log_offset FROM events WHERE half_offset = ? "
                "ORDER BY log_offset",
                (half_offset,),
            )
            .fetchall()
        )

    def iter_due(self, now_ms: int, batch: int = 512) -> Iterator[tuple[Any, ...]]:
        """Yield pending halves due by ``now_ms`` in (due_at, half_offset) order."""
        after = (-(1 << 62), -1)
        c = self.conn()
        while True:
            rows = c.execute(
                "SELECT due_at, half_offset, queue_offset, producer_group, topic, born_ts "
                "FROM halves WHERE state = ? AND due_at <= ? AND (due_at, half_offset) > (?, ?) "
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

    def topic_counts(self) -> list[tuple[str, int, int]]:
        return [
            (t, int(s), int(n))
            for t, s, n in self.conn().execute(
                "SELECT topic, state, n FROM topic_counts WHERE n != 0"
            )
        ]


class _Folder:
    """Applies events to the index inside one write transaction."""

    def __init__(
        self, c: sqlite3.Connection, timeout_ms: int, interval_ms: int
    ) -> None:
        self.c = c
        self.timeout_ms = timeout_ms
        self.interval_ms = interval_ms
        self.halves: list[tuple[Any, ...]] = []
        self.keys: list[tuple[str, int]] = []
        self.counters: dict[str, int] = {}
        self.topics: dict[tuple[str, int], int] = {}

    def _bump(self, name: str, n: int = 1) -> None:
        self.counters[name] = self.counters.get(name, 0) + n

    def _topic(self, topic: str, state: int, n: int) -> None:
        k = (topic, state)
        self.topics[k] = self.topics.get(k, 0) + n

    def _flush_halves(self) -> None:
        if self.halves:
            self.c.executemany(
                "INSERT OR IGNORE INTO halves(half_offset, queue_offset, msg_id, "
                "producer_group, topic, queue_id, tags, keys, born_ts, check_count, "
                "due_at, state) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                self.halves,
            )
            self.halves.clear()
        if self.keys:
            self.c.executemany(
                "INSERT OR IGNORE INTO half_keys VALUES (?, ?)", self.keys
            )
            self.keys.clear()

    def fold(self, ev: R.TxEvent) -> None:
        p = ev.properties
        if ev.kind == R.HALF:
            topic = p.get(PROPERTY_REAL_TOPIC, "")
            try:
                qid = int(p.get(PROPERTY_REAL_QID, "0"))
            except ValueError:
                qid = 0
            checks = _int(p.get(R.PROPERTY_TRANSACTION_CHECK_TIMES))
            due = ev.born_timestamp + R.immunity_ms(p, self.timeout_ms)
            keys = p.get(PROPERTY_KEYS)
            self.halves.append(
                (
                    ev.half_offset,
                    ev.queue_offset,
                    p.get(PROPERTY_UNIQ_KEY),
                    p.get(PROPERTY_PRODUCER_GROUP, ""),
                    topic,
                    qid,
                    p.get(PROPERTY_TAGS),
                    keys,
                    ev.born_timestamp,
                    checks,
                    due,
                    S.PENDING,
                )
            )
            if keys:
                self.keys.extend((k, ev.half_offset) for k in set(keys.split(" ")) if k)
            self._topic(topic, S.PENDING, 1)
            return
        self._flush_halves()
        c = self.c
        row = c.execute(
            "SELECT state, topic, born_ts, check_count FROM halves WHERE half_offset = ?",
            (ev.half_offset,),
        ).fetchone()
        if row is None:
            return
        state, topic, born, checks = row
        at = ev.store_timestamp
        if ev.kind == R.COMMIT_MSG:
            if state in (S.PENDING, S.DISCARDED):
                self._final(ev, state, topic, born, S.COMMITTED, None, None)
                c.execute(
                    "UPDATE halves SET commit_offset = ? WHERE half_offset = ?",
                    (ev.log_offset, ev.half_offset),
                )
            elif state == S.COMMITTED:
                c.execute(
                    "UPDATE halves SET commit_offset = COALESCE(commit_offset, ?) "
                    "WHERE half_offset = ?",
                    (ev.log_offset, ev.half_offset),
                )
        elif ev.kind == R.OUTCOME:
            new = (
                S.COMMITTED if p.get(R.PROPERTY_OUTCOME) == "COMMIT" else S.ROLLED_BACK
            )
            src, op = p.get(R.PROPERTY_SOURCE), p.get(R.PROPERTY_OPERATOR)
            if state in (S.PENDING, S.DISCARDED):
                self._final(ev, state, topic, born, new, src, op)
            elif state == new:  # the commit message was folded first
                c.execute(
                    "UPDATE halves SET outcome_source = COALESCE(outcome_source, ?), "
                    "operator = COALESCE(operator, ?) WHERE half_offset = ?",
                    (src, op, ev.half_offset),
                )
            else:
                return
            self._event(ev, "COMMIT" if new == S.COMMITTED else "ROLLBACK", src, op)
        elif ev.kind == R.CHECK:
            n = _int(p.get(R.PROPERTY_TRANSACTION_CHECK_TIMES))
            check_at = _int(p.get(R.PROPERTY_CHECK_AT)) or at
            answer = p.get(R.PROPERTY_CHECK_ANSWER, "FAILED")
            self._bump("checks_sent")
            self._bump("checks_failed" if answer == "FAILED" else "checks_answered")
            if state == S.PENDING:
                c.execute(
                    "UPDATE halves SET check_count = ?, last_check_at = ?, due_at = ? "
                    "WHERE half_offset = ?",
                    (
                        max(n, checks),
                        check_at,
                        check_at + self.interval_ms,
                        ev.half_offset,
                    ),
                )
            lat = p.get(R.PROPERTY_CHECK_LATENCY_US)
            self._event(
                ev,
                "CHECK",
                "CHECK",
                None,
                transport=p.get(R.PROPERTY_CHECK_TRANSPORT),
                target=p.get(R.PROPERTY_CHECK_TARGET),
                answer=answer,
                latency_ms=_int(lat) / 1000 if lat else None,
                check_no=n,
                detail=p.get(R.PROPERTY_DETAIL),
                at=check_at,
            )
        elif ev.kind == R.DISCARD:
            if state != S.PENDING:
                return
            reason = p.get(R.PROPERTY_DETAIL)
            c.execute(
                "UPDATE halves SET state = ?, discard_reason = ?, outcome_at = ? "
                "WHERE half_offset = ?",
                (S.DISCARDED, reason, at, ev.half_offset),
            )
            self._topic(topic, S.PENDING, -1)
            self._topic(topic, S.DISCARDED, 1)
            self._bump("discards")
            self._event(ev, "DISCARD", p.get(R.PROPERTY_SOURCE), None, detail=reason)
        elif ev.kind == R.RESUME:
            if state != S.DISCARDED:
                return
            c.execute(
                "UPDATE halves SET state = ?, check_count = 0, due_at = ?, "
                "discard_reason = NULL, outcome_at = NULL WHERE half_offset = ?",
                (S.PENDING, at, ev.half_offset),
            )
            self._topic(topic, S.DISCARDED, -1)
            self._topic(topic, S.PENDING, 1)
            self._bump("resumes")
            self._event(
                ev, "RESUME", p.get(R.PROPERTY_SOURCE), p.get(R.PROPERTY_OPERATOR)
            )

    def _final(
        self,
        ev: R.TxEvent,
        old: int,
        topic: str,
        born: int,
        new: int,
        src: str | None,
        op: str | None,
    ) -> None:
        at = ev.store_timestamp
        self.c.execute(
            "UPDATE halves SET state = ?, outcome_at = ?, outcome_source = ?, "
            "operator = ? WHERE half_offset = ?",
            (new, at, src, op, ev.half_offset),
        )
        self._topic(topic, old, -1)
        self._topic(topic, new, 1)
        self._bump("commits" if new == S.COMMITTED else "rollbacks")
        ms = max(0, at - born)
        self._bump(f"latency_le_{_latency_bucket(ms)}")
        self._bump("latency_count")
        self._bump("latency_sum_ms", ms)

    def _event(
        self,
        ev: R.TxEvent,
        kind: str,
        source: str | None,
        operator: str | None,
        transport: str | None = None,
        target: str | None = None,
        answer: str | None = None,
        latency_ms: float | None = None,
        check_no: int | None = None,
        detail: str | None = None,
        at: int | None = None,
    ) -> None:
        self.c.execute(
            "INSERT OR IGNORE INTO events VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
            (
                ev.log_offset,
                ev.half_offset,
                at or ev.store_timestamp,
                kind,
                source,
                operator,
                transport,
                target,
                answer,
                latency_ms,
                check_no,
                detail,
            ),
        )

    def finish(self) -> None:
        self._flush_halves()
        c = self.c
        for name, n in self.counters.items():
            c.execute(
                "INSERT INTO counters VALUES (?, ?) ON CONFLICT(name) DO UPDATE "
                "SET value = value + excluded.value",
                (name, n),
            )
        for (topic, state), n in self.topics.items():
            if n:
                c.execute(
                    "INSERT INTO topic_counts VALUES (?, ?, ?) ON CONFLICT(topic, state) "
                    "DO UPDATE SET n = n + excluded.n",
                    (topic, state, n),
                )


def _int(raw: str | None) -> int:
    try:
        return max(0, int(raw)) if raw else 0
    except ValueError:
        return 0
