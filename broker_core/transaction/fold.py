"""Folding transaction records into the pending index (inside one SQLite write
transaction): halves become rows, checks, outcomes, discards and resumes update
them and add history events; counters and per-topic gauges move by deltas."""

from __future__ import annotations

import sqlite3
from typing import Any

from broker_core.message import (
    PROPERTY_KEYS,
    PROPERTY_PRODUCER_GROUP,
    PROPERTY_REAL_QID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
)
from broker_core.transaction import records as R
from broker_core.transaction import statetable as S

#: Upper bounds (ms) of the half-to-outcome histogram; -1 is +inf.
LATENCY_BUCKETS = (10, 50, 100, 500, 1000, 5000, 10000, 60000, 300000, 3600000, -1)


def _latency_bucket(ms: int) -> int:
    for b in LATENCY_BUCKETS:
        if b < 0 or ms <= b:
            return b
    return -1


class Folder:
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
        self.groups: dict[tuple[str, int], int] = {}

    def _bump(self, name: str, n: int = 1) -> None:
        self.counters[name] = self.counters.get(name, 0) + n

    def _move(self, topic: str, group: str, state: int, n: int) -> None:
        """Add ``n`` halves in ``state`` to the topic and group gauges."""
        k = (topic, state)
        self.topics[k] = self.topics.get(k, 0) + n
        g = (group, state)
        self.groups[g] = self.groups.get(g, 0) + n

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
            self._move(topic, p.get(PROPERTY_PRODUCER_GROUP, ""), S.PENDING, 1)
            return
        self._flush_halves()
        c = self.c
        row = c.execute(
            "SELECT state, topic, born_ts, check_count, producer_group FROM halves "
            "WHERE half_offset = ?",
            (ev.half_offset,),
        ).fetchone()
        if row is None:
            return
        state, topic, born, checks, group = row
        at = ev.store_timestamp
        if ev.kind == R.COMMIT_MSG:
            if state in (S.PENDING, S.DISCARDED):
                self._final(ev, state, topic, group, born, S.COMMITTED, None, None)
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
                self._final(ev, state, topic, group, born, new, src, op)
            elif state == new:  # the commit message was folded first
                c.execute(
                    "UPDATE halves SET outcome_source = COALESCE(outcome_source, ?), "
                    "operator = COALESCE(operator, ?) WHERE half_offset = ?",
                    (src, op, ev.half_offset),
                )
            else:
                return
            self._event(ev, "COMMIT" if new == S.COMMITTED else "ROLLBACK", src, op)
        elif ev.kind == R.ANSWER:
            answer = p.get(R.PROPERTY_CHECK_ANSWER, "UNKNOWN")
            self._bump("checks_answered")
            self._bump(f"checks_answered_{answer.lower()}")
            lat = p.get(R.PROPERTY_CHECK_LATENCY_US)
            self._event(
                ev,
                "ANSWER",
                "CHECK",
                None,
                transport="grpc",
                target=p.get(R.PROPERTY_CHECK_TARGET),
                answer=answer,
                latency_ms=_int(lat) / 1000 if lat else None,
                at=_int(p.get(R.PROPERTY_CHECK_AT)) or at,
            )
        elif ev.kind == R.CHECK:
            n = _int(p.get(R.PROPERTY_TRANSACTION_CHECK_TIMES))
            check_at = _int(p.get(R.PROPERTY_CHECK_AT)) or at
            answer = p.get(R.PROPERTY_CHECK_ANSWER, "FAILED")
            self._bump("checks_sent")
            if answer == "FAILED":
                self._bump("checks_failed")
                why = p.get(R.PROPERTY_CHECK_FAILURE, "error")
                self._bump(f"checks_failed_{why}")
            elif answer != "SENT":  # an asynchronous checker answers later
                self._bump("checks_answered")
                self._bump(f"checks_answered_{answer.lower()}")
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
                # A check that reached nobody has no number: it did not count.
                check_no=None if p.get(R.PROPERTY_CHECK_DELIVERED) == "false" else n,
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
            self._move(topic, group, S.PENDING, -1)
            self._move(topic, group, S.DISCARDED, 1)
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
            self._move(topic, group, S.DISCARDED, -1)
            self._move(topic, group, S.PENDING, 1)
            self._bump("resumes")
            self._event(
                ev, "RESUME", p.get(R.PROPERTY_SOURCE), p.get(R.PROPERTY_OPERATOR)
            )

    def _final(
        self,
        ev: R.TxEvent,
        old: int,
        topic: str,
        group: str,
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
        self._move(topic, group, old, -1)
        self._move(topic, group, new, 1)
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
                    "INSERT INTO topic_counts VALUES (?, ?, ?) "
                    "ON CONFLICT(topic, state) "
                    "DO UPDATE SET n = n + excluded.n",
                    (topic, state, n),
                )
        for (group, state), n in self.groups.items():
            if n:
                c.execute(
                    "INSERT INTO group_counts VALUES (?, ?, ?) "
                    "ON CONFLICT(producer_group, state) "
                    "DO UPDATE SET n = n + excluded.n",
                    (group, state, n),
                )


def _int(raw: str | None) -> int:
    try:
        return max(0, int(raw)) if raw else 0
    except ValueError:
        return 0
