"""Pop consumption for the gRPC endpoint: invisibility, receipt handles,
redelivery with attempts, FIFO message groups, dead letters; the state shared
by every endpoint process of a store.

State per (consumer group, topic, queue): a pop ``cursor`` (next offset not yet
read) and the ``pending`` entries (offset -> attempts, visible-at, nonce,
message group) of messages read but not acknowledged. The committed offset is
the low-water mark: the smallest pending offset, or the cursor.

It lives in ``<store>/grpc/pop.db``, SQLite in WAL mode, so that ``serve
--workers N`` runs N endpoint processes over one state (RocketMQ 5 keeps its
pop checkpoints in the store too): a receipt handle popped on one process is
acknowledged, renewed or dead-lettered on another, and a FIFO group stays
blocked while any process has one of its messages in flight. Every change is
one short ``BEGIN IMMEDIATE`` transaction (a pop batch, the acks of one or
several calls, one change of invisibility, a renewal round), which serialises
the processes; reads of the log (filling a queue's pending entries) happen
outside it. A commit is in the WAL when the call returns (``synchronous
NORMAL``: it survives a crash of the process, not of the machine).

Within one process the methods are called by one thread at a time (the
endpoint's consumer thread, or its event loop for an ack while the pop state
is free; ``Endpoint.pop_lock``); message bodies read from the log are cached
per process (the log is immutable), auto-renewals belong to the process whose
client asked for them.

A consumer of a group also receives what is in the group's retry topic
``%RETRY%<group>`` for its topic (``retrytopic.py``): the pop state reads it
under a key of its own per original topic.

Two responsibilities live beside it: ``popoffsets`` applies operators'
offset resets to the pop cursors and mirrors the low-water marks to the
store's consumer offsets; ``renewal`` keeps auto-renewed handles valid.
"""

from __future__ import annotations

import contextlib
import logging
import random
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from broker_core.broker import Broker
from broker_core.endpoint import retrytopic as RT
from broker_core.endpoint.popoffsets import PopOffsets
from broker_core.endpoint.popstate import PopState, busy_as, now_ms
from broker_core.endpoint.renewal import Renewals
from broker_core.errors import InvalidHandle, StoreError
from broker_core.filter import TAG, build_matcher
from broker_core.message import MessageExt, MessageInner, PullStatus
from broker_core.tags import parse_subscription

SHARDING_KEY = "__SHARDINGKEY"
#: How long one pop's filtered reads go on scanning (seconds; see ``pop``).
POP_SCAN_S = 0.05
#: pending entries deleted by one statement of a batch of acks (5 values each)
ACK_CHUNK = 150
#: Message bodies kept per process (read once from the log, handed out later).
CACHE_ENTRIES = 16_384

#: Why a dead letter's copy is in ``%DLQ%<group>`` (its ``DLQ_REASON``): its
#: delivery attempts ran out, or its consumer forwarded it
#: (ForwardMessageToDeadLetterQueue).
DLQ_REASON = "DLQ_REASON"
DLQ_MAX_ATTEMPTS = "MAX_ATTEMPTS"
DLQ_FORWARDED = "FORWARDED_BY_CONSUMER"

log = logging.getLogger(__name__)


@dataclass(slots=True)
class Entry:
    """One delivery: the pending entry as this pop left it, with its message."""

    offset: int
    #: the message; a ``RetriedMessage`` (original topic) from the retry topic
    msg: MessageExt | RT.RetriedMessage | None
    group: str | None
    attempts: int = 0
    visible_at: int = 0
    nonce: int = 0


def encode_handle(qid: int, offset: int, nonce: int, deadline: int) -> str:
    return f"P1:{qid}:{offset}:{nonce:x}:{deadline}"


def decode_handle(handle: str) -> tuple[int, int, int, int]:
    try:
        tag, qid, off, nonce, deadline = handle.split(":")
        if tag != "P1":
            raise ValueError(tag)
        out = int(qid), int(off), int(nonce, 16), int(deadline)
    except (ValueError, AttributeError) as exc:
        raise InvalidHandle(f"malformed receipt handle {handle[:200]!r}") from exc
    if not all(0 <= v < 1 << 63 for v in out):
        # Beyond what SQLite stores (an OverflowError): no handle of ours.
        raise InvalidHandle(f"malformed receipt handle {handle[:200]!r}")
    return out


def _nonce() -> int:
    return random.getrandbits(48)


STALE = "the receipt handle is stale or unknown"


class PopManager:
    def __init__(
        self,
        broker: Broker,
        max_attempts: int = 17,
        refill: int = 256,
        max_pending: int = 20_000,
    ) -> None:
        self.broker = broker
        self.store = broker.store
        self.max_attempts = max_attempts
        self.refill = refill
        #: whether the last ``pop`` stopped scanning at its deadline
        #: (``POP_SCAN_S``) with more maybe left to read
        self.cut_short = False
        #: read-ahead bound per queue (in flight + waiting for redelivery)
        self.max_pending = max_pending
        self.dlq_count = 0
        self._rr = 0
        #: (topic, queue, offset) -> message, read from the log by this process
        self.cache: dict[tuple[str, int, int], MessageExt] = {}
        #: (group, topic, queue) whose cursor row this process has seen
        self._known: set[tuple[str, str, int]] = set()
        #: (type, expression) of the filters seen to parse
        self._filters: set[tuple[str, str]] = set()
        #: the log end consumers may read up to (None: no limit), asked at
        #: every read: a SYNC cluster node's in-sync end (``visible_end``)
        self.visible_end: Callable[[], int | None] | None = None
        self.state = PopState(
            self.store.root, lambda: self.offsets.apply_resets(), self._forget
        )
        self.path = self.state.path
        #: operator resets in, low-water marks out (``popoffsets``)
        self.offsets = PopOffsets(
            self.store, self.state, self._read_queue_nums, self._queue_reset
        )
        #: auto-renewed handles of this process's clients (``renewal``)
        self.renewals = Renewals(self.state)
        try:
            self.state.open()
        except StoreError as exc:
            # A full disk (no room for the WAL): serve anyway; receives and
            # acks fail with the reason until the database can be opened.
            log.warning("%s; consumption resumes once it can be opened", exc)

    def _forget(self) -> None:
        """The pop state's file was dropped (damaged, or replaced by another
        process): what this process knew of the old one goes too."""
        self._known.clear()
        self.renewals.clear()

    def _queue_reset(self, group: str, key: str, qid: int) -> None:
        """An offset reset dropped the queue's entries (``PopOffsets``)."""
        self._known.add((group, key, qid))
        self.renewals.drop_queue(group, key, qid)

    # -- the pop state's file (``popstate.PopState``) --------------------------
    def recover(self, exc: BaseException) -> bool:
        return self.state.recover(exc)

    def replaced(self) -> bool:
        return self.state.replaced()

    def available(self) -> bool:
        return self.state.available()

    @property
    def db(self) -> sqlite3.Connection:
        return self.state.db

    @property
    def db_nowait(self) -> sqlite3.Connection:
        return self.state.db_nowait

    def close(self) -> None:
        self.state.close()

    def _write(self, wait: bool = True) -> contextlib.AbstractContextManager:
        return self.state.write(wait)

    def checkpoint(self) -> None:
        self.state.checkpoint()

    # -- helpers -------------------------------------------------------------
    def _read(self, topic: str, qid: int, off: int) -> MessageExt | None:
        """The message at ``off`` of the queue a pop-state key reads."""
        topic = RT.source(topic)
        m = self.cache.get((topic, qid, off))
        if m is not None:
            return m
        try:
            units = self.store.get_queue_units(topic, qid, off, 1)
            if not units:
                return None
            return self.store.read_message(units[0][0])
        except Exception:  # noqa: BLE001
            return None

    def _cache(self, topic: str, qid: int, m: MessageExt) -> None:
        cache = self.cache
        if len(cache) >= CACHE_ENTRIES:
            del cache[next(iter(cache))]
        cache[(topic, qid, m.queue_offset)] = m

    def _read_queue_nums(self, topic: str) -> int:
        self.store.refresh_topics()
        cfg = self.store.topics.topics.get(topic)
        return cfg.read_queue_nums if cfg else 0

    def _ensure_queues(self, group: str, topic: str, n: int) -> None:
        """Create the cursor rows this process has not seen (a new group starts
        at the group's committed offset, else at the queue's first)."""
        new = [q for q in range(n) if (group, topic, q) not in self._known]
        if not new:
            return
        starts = []
        src = RT.source(topic)
        for qid in new:
            # A retry key starts at the retry queue's first message: the
            # group's committed offset there is the lowest of the keys read
            # so far, which may have passed messages for this topic.
            start = (
                -1 if src != topic else self.store.committed_offset(group, topic, qid)
            )
            if start < 0:
                start = self.store.min_offset(src, qid)
            starts.append((group, topic, qid, start, start))
        with self._write() as db:
            db.executemany("INSERT OR IGNORE INTO queues VALUES (?,?,?,?,?)", starts)
        self._known.update((group, topic, q) for q in new)

    # -- pop -----------------------------------------------------------------
    def pop(
        self,
        group: str,
        topic: str,
        batch: int,
        invisible_ms: int,
        expression: str,
        expression_type: str,
    ) -> list[tuple[int, Entry]]:
        """Return up to ``batch`` (queue id, entry) pairs now invisible: of
        ``topic``, and of the group's retry topic for ``topic`` (first in
        ``POP_FROM_RETRY_PERCENT`` of the pops, else after the topic)."""
        n = self._read_queue_nums(topic)
        if not n:
            return []
        self._check_filter(expression, expression_type)
        sources = [(topic, n)]
        if RT.reads_retry(topic):
            cfg = self.store.topics.topics.get(RT.retry_topic(group))
            if cfg is not None and cfg.read_queue_nums:
                retry = (RT.retry_key(group, topic), cfg.read_queue_nums)
                if random.randrange(100) < RT.POP_FROM_RETRY_PERCENT:
                    sources.insert(0, retry)
                else:
                    sources.append(retry)
        self._rr += 1
        plans = []
        for key, nq in sources:
            self._ensure_queues(group, key, nq)
            start = self._rr % nq
            order = [*range(start, nq), *range(start)]
            fills, available = self._to_fill(group, key, order, batch)
            if fills or available:
                plans.append((key, order, fills))
        if not plans:
            return []  # nothing to read nor to hand out: no write lock taken
        # A filter is evaluated on the one pop thread: one pop's reads stop
        # scanning soon after this (each queue still reads one batch), so a
        # costly SQL92 filter over non-matching messages cannot hold up other
        # consumers; its next pop goes on from where this one stopped.
        deadline = time.monotonic() + POP_SCAN_S
        pulled = []
        read_any = False
        self.cut_short = False
        for key, _order, fills in plans:
            reads: list[tuple[int, int, tuple[int, list[MessageExt]]]] = []
            for qid, cursor in fills:
                if read_any and time.monotonic() > deadline:
                    # Out of time: this queue is read by a later pop.
                    self.cut_short = True
                    reads.append((qid, cursor, (cursor, [])))
                    continue
                got = self._pull(
                    group, key, qid, cursor, expression, expression_type, deadline
                )
                read_any = True
                reads.append((qid, cursor, got))
            pulled.append(reads)
        if time.monotonic() > deadline:
            self.cut_short = True  # a read stopped at the deadline, or might have
        now = now_ms()
        out: list[tuple[int, Entry]] = []
        with self._write() as db:
            for (key, _order, _fills), reads in zip(plans, pulled, strict=True):
                for qid, cursor, (next_offset, messages) in reads:
                    self._store_fill(db, group, key, qid, cursor, next_offset, messages)
            for key, order, _fills in plans:
                for qid in order:
                    if len(out) >= batch:
                        break
                    self._hand_out(db, group, key, qid, batch, invisible_ms, now, out)
        return out

    def _check_filter(self, expression: str, expression_type: str) -> None:
        """``FilterError`` for an expression that does not parse, even when no
        read happens (the queues are all read up to their end)."""
        key = (expression_type, expression)
        if key in self._filters:
            return
        if expression_type.upper() == TAG:
            parse_subscription(expression)
        else:
            build_matcher(expression_type, expression)
        if len(self._filters) >= 1024:
            self._filters.clear()
        self._filters.add(key)

    def _to_fill(
        self, group: str, topic: str, order: list[int], batch: int
    ) -> tuple[list[tuple[int, int]], int]:
        """(queue, cursor) of the queues to read more of before handing out, in
        the order they are visited until enough is visible for the batch; and
        how many visible entries those queues have."""
        rows = {
            qid: (cursor, count, visible)
            for qid, cursor, count, visible in self.db.execute(
                "SELECT q.qid, q.cursor, count(p.off), "
                "coalesce(sum(p.visible_at <= ?), 0) FROM queues q "
                "LEFT JOIN pending p ON p.grp=q.grp AND p.topic=q.topic "
                "AND p.qid=q.qid WHERE q.grp=? AND q.topic=? GROUP BY q.qid",
                (now_ms(), group, topic),
            )
        }
        out = []
        available = 0
        for qid in order:
            cursor, count, visible = rows.get(qid, (0, 0, 0))
            available += visible
            if (
                count < self.max_pending
                and (count < max(batch * 2, 64) or visible < batch)
                and cursor != self.store.max_offset(RT.source(topic), qid)
            ):
                out.append((qid, cursor))
            if available >= batch:
                break
        return out, available

    def _pull(
        self,
        group: str,
        topic: str,
        qid: int,
        cursor: int,
        expression: str,
        expression_type: str,
        deadline: float | None = None,
    ) -> tuple[int, list[MessageExt]]:
        """Read from ``cursor`` (outside the write lock): the next cursor and
        the messages that match. For a retry key, the retry topic's messages
        whose original topic is the key's and that the filter matches."""
        original = RT.origin(topic)
        if original is None:
            r = self.broker.pull(
                group,
                topic,
                qid,
                cursor,
                max_messages=self.refill,
                expression=expression,
                expression_type=expression_type,
                deadline=deadline,
            )
        else:
            r = self.broker.pull(
                group, RT.source(topic), qid, cursor, max_messages=self.refill
            )
        if r.status is PullStatus.OFFSET_ILLEGAL:
            return r.next_offset, []
        messages = r.messages
        limit = self.visible_end() if self.visible_end is not None else None
        if limit is not None:
            for i, m in enumerate(messages):
                if m.commit_log_offset + m.store_size > limit:
                    # Not on every in-sync slave yet: read again from here.
                    messages = messages[:i]
                    r.next_offset = m.queue_offset
                    break
        if original is not None:
            messages = RT.keeps(messages, original, expression, expression_type)
        for m in messages:
            self._cache(RT.source(topic), qid, m)
        return r.next_offset, messages

    def _store_fill(
        self,
        db: sqlite3.Connection,
        group: str,
        topic: str,
        qid: int,
        cursor: int,
        next_offset: int,
        messages: list[MessageExt],
    ) -> None:
        """Add what was read to the queue's pending entries, unless another
        process moved the cursor meanwhile (it read the same messages)."""
        moved = db.execute(
            "UPDATE queues SET cursor=? WHERE grp=? AND topic=? AND qid=? AND cursor=?",
            (next_offset, group, topic, qid, cursor),
        ).rowcount
        if moved and messages:
            db.executemany(
                "INSERT OR IGNORE INTO pending VALUES (?,?,?,?,0,0,0,?)",
                [
                    (group, topic, qid, m.queue_offset, m.properties.get(SHARDING_KEY))
                    for m in messages
                ],
            )

    def _hand_out(
        self,
        db: sqlite3.Connection,
        group: str,
        topic: str,
        qid: int,
        batch: int,
        invisible_ms: int,
        now: int,
        out: list[tuple[int, Entry]],
    ) -> None:
        """Deliver visible entries of one queue into ``out`` (up to ``batch``):
        oldest first, dead letters after the group's delivery attempts; for a
        FIFO consumer group (its setting, ``groups.GroupRegistry``) one message
        in flight per message group, as Apache RocketMQ delivers orderly groups
        (other groups get a message group's messages concurrently)."""
        key = (group, topic, qid)
        fifo = self.store.groups.is_fifo(group)
        blocked = (
            {
                g
                for (g,) in db.execute(
                    "SELECT DISTINCT mgroup FROM pending WHERE grp=? AND topic=? "
                    "AND qid=? AND mgroup IS NOT NULL AND visible_at > ?",
                    (*key, now),
                )
            }
            if fifo
            else set()
        )
        updates: list[tuple[int, int, int, str, str, int, int]] = []
        gone: list[tuple[str, str, int, int]] = []
        dead: list[tuple[int, int]] = []
        cur = db.execute(
            "SELECT off, attempts, mgroup FROM pending WHERE grp=? AND topic=? "
            "AND qid=? AND visible_at <= ? ORDER BY off",
            (*key, now),
        )
        limit = self.store.groups.max_attempts(group, self.max_attempts)
        src, original = RT.source(topic), RT.origin(topic)
        # An entry of the retry topic: its handle says so (``RT.RETRY_NONCE``).
        flag = 0 if original is None else RT.RETRY_NONCE
        try:
            for off, attempts, mgroup in cur:
                if attempts >= limit:
                    dead.append((off, attempts))
                    continue
                if fifo and mgroup is not None:
                    if mgroup in blocked:
                        continue
                    blocked.add(mgroup)
                m = self._read(topic, qid, off)
                if m is None:
                    if off < self.store.min_offset(src, qid):
                        gone.append((*key, off))  # purged from the log
                    else:
                        # Not readable here now: left pending (its group
                        # stays blocked), never dropped.
                        log.warning("pop: %s/%d@%d unreadable, kept", topic, qid, off)
                    continue
                msg = m if original is None else RT.RetriedMessage(m, original)
                e = Entry(
                    off, msg, mgroup, attempts + 1, now + invisible_ms, _nonce() | flag
                )
                updates.append((e.attempts, e.visible_at, e.nonce, *key, off))
                out.append((qid, e))
                if len(out) >= batch:
                    break
        finally:
            cur.close()
        for off, attempts in dead:
            if self._read(topic, qid, off) is None and off >= self.store.min_offset(
                src, qid
            ):
                continue  # unreadable now: dead-lettered at a later pop
            self._to_dlq(db, group, topic, qid, off, attempts)
        if gone:
            db.executemany(
                "DELETE FROM pending WHERE grp=? AND topic=? AND qid=? AND off=?", gone
            )
        if updates:
            db.executemany(
                "UPDATE pending SET attempts=?, visible_at=?, nonce=? "
                "WHERE grp=? AND topic=? AND qid=? AND off=?",
                updates,
            )

    def _to_dlq(
        self,
        db: sqlite3.Connection,
        group: str,
        topic: str,
        qid: int,
        off: int,
        attempts: int,
        reason: str = DLQ_MAX_ATTEMPTS,
    ) -> None:
        """Copy the message to ``%DLQ%<group>`` and drop its entry (in the
        caller's transaction: a copy that fails to store keeps the entry);
        ``reason`` (``DLQ_REASON``): its attempts ran out, or its consumer
        forwarded it."""
        m = self._read(topic, qid, off)
        if m is not None:
            inner: MessageInner = m.to_inner()
            inner.topic = f"%DLQ%{group}"
            inner.queue_id = 0
            props = dict(inner.properties)
            # From the retry topic: the original topic it was resent for.
            props["RETRY_TOPIC"] = RT.origin(topic) or topic
            props["ORIGIN_MESSAGE_ID"] = props.get("UNIQ_KEY", m.offset_msg_id)
            props["DLQ_ORIGIN_QUEUE"] = str(qid)
            props["DLQ_ORIGIN_OFFSET"] = str(off)
            props[DLQ_REASON] = reason
            inner.properties = props
            inner.reconsume_times = attempts
            self.store.put_inner(inner)
            self.dlq_count += 1
        db.execute(
            "DELETE FROM pending WHERE grp=? AND topic=? AND qid=? AND off=?",
            (group, topic, qid, off),
        )
        self.cache.pop((RT.source(topic), qid, off), None)
        self.renewals.drop((group, topic, qid, off))

    # -- handles -------------------------------------------------------------
    def release(self, group: str, topic: str, got: list[tuple[int, Entry]]) -> None:
        """Make popped entries that never reached the client visible again now:
        their handles become stale and the attempt is not counted."""
        keyed = [(RT.key_for(group, topic, e.nonce), qid, e) for qid, e in got]
        with self._write() as db:
            db.executemany(
                "UPDATE pending SET attempts=max(0, attempts-1), visible_at=0, "
                "nonce=? WHERE grp=? AND topic=? AND qid=? AND off=? AND nonce=?",
                [(_nonce(), group, k, qid, e.offset, e.nonce) for k, qid, e in keyed],
            )
        for k, qid, e in keyed:
            self.renewals.drop((group, k, qid, e.offset))

    def ack_all(
        self, calls: list[tuple[str, str, list[str]]], wait: bool = True
    ) -> list[list[str | None]]:
        """Acknowledge the handles of one or more AckMessage calls at once: per
        call, per handle, None or why it was refused. With ``wait=False``,
        ``Busy`` instead of waiting for another process."""
        out: list[list[str | None]] = []
        keys: list[tuple[int, int, tuple[str, str, int, int, int]]] = []
        for i, (group, topic, handles) in enumerate(calls):
            results: list[str | None] = []
            for j, handle in enumerate(handles):
                try:
                    qid, off, nonce, _deadline = decode_handle(handle)
                except InvalidHandle as exc:
                    results.append(str(exc))
                    continue
                results.append(None)
                key = RT.key_for(group, topic, nonce)
                keys.append((i, j, (group, key, qid, off, nonce)))
            out.append(results)
        delete = (
            "DELETE FROM pending WHERE grp=? AND topic=? AND qid=? AND off=? "
            "AND nonce=?"
        )
        if len(keys) == 1:
            # The usual call (the official clients ack one message a call):
            # one statement, its own transaction.
            db = self.db if wait else self.db_nowait
            with busy_as(wait):
                deleted = [db.execute(delete, keys[0][2]).rowcount]
        elif keys:
            with self._write(wait) as db:
                deleted = self._delete_many(db, [key for _i, _j, key in keys])
        else:
            deleted = []
        for (i, j, (group, topic, qid, off, _nonce)), n in zip(
            keys, deleted, strict=True
        ):
            if not n:
                out[i][j] = STALE
                continue
            self.cache.pop((RT.source(topic), qid, off), None)
            self.renewals.drop((group, topic, qid, off))
        return out

    @staticmethod
    def _delete_many(
        db: sqlite3.Connection, keys: list[tuple[str, str, int, int, int]]
    ) -> list[int]:
        """Delete the pending entries of ``keys`` (group, topic, queue, offset,
        nonce), up to ``ACK_CHUNK`` a statement: 1 for each one deleted, 0 for
        each that was not there (stale)."""
        gone: set[tuple[str, str, int, int, int]] = set()
        for i in range(0, len(keys), ACK_CHUNK):
            chunk = keys[i : i + ACK_CHUNK]
            # ORed equalities: each a primary-key search (a row-value IN
            # list would scan the table)
            where = " OR ".join(
                ["(grp=? AND topic=? AND qid=? AND off=? AND nonce=?)"] * len(chunk)
            )
            params = [v for key in chunk for v in key]
            gone.update(
                db.execute(
                    f"DELETE FROM pending WHERE {where} "
                    "RETURNING grp, topic, qid, off, nonce",
                    params,
                ).fetchall()
            )
        out = []
        for key in keys:
            # the same handle twice: acknowledged once, stale the second time
            out.append(1 if key in gone else 0)
            gone.discard(key)
        return out

    def change_invisible(
        self,
        group: str,
        topic: str,
        handle: str,
        invisible_ms: int,
        backoff_ms: list[int] | None = None,
    ) -> str:
        """A new handle for the entry of ``handle``, invisible ``invisible_ms``
        from now; with ``backoff_ms`` (a push consumer's retry), at least the
        backoff for the entry's attempt (its first for attempt 1, the last
        for every attempt past the list)."""
        qid, off, nonce, _deadline = decode_handle(handle)
        topic = RT.key_for(group, topic, nonce)
        new = _nonce() | (nonce & RT.RETRY_NONCE)
        with self._write() as db:
            if backoff_ms:
                row = db.execute(
                    "SELECT attempts FROM pending WHERE grp=? AND topic=? AND qid=? "
                    "AND off=? AND nonce=?",
                    (group, topic, qid, off, nonce),
                ).fetchone()
                if row is not None:
                    step = backoff_ms[min(max(row[0], 1), len(backoff_ms)) - 1]
                    invisible_ms = max(invisible_ms, step)
            visible_at = now_ms() + invisible_ms
            if not db.execute(
                "UPDATE pending SET nonce=?, visible_at=? WHERE grp=? AND topic=? "
                "AND qid=? AND off=? AND nonce=?",
                (new, visible_at, group, topic, qid, off, nonce),
            ).rowcount:
                raise InvalidHandle(STALE)
        self.renewals.drop((group, topic, qid, off))
        return encode_handle(qid, off, new, visible_at)

    def sweep_dead(self, now: int | None = None, limit: int = 512) -> int:
        """Dead-letter entries whose last allowed delivery has run out, whether
        or not anyone still receives from their queue (Apache's pop revive
        does the same in the background): a PushConsumer that failed a
        message's last attempt and went away leaves it in ``%DLQ%<group>``,
        not pending until the group's next receive. Returns how many moved."""
        now = now_ms() if now is None else now
        groups = self.store.groups
        floor = min(
            [self.max_attempts]
            + [g.max_delivery_attempts for g in groups.all() if g.max_delivery_attempts]
        )
        moved = 0
        with self._write(wait=False) as db:
            rows = db.execute(
                "SELECT grp, topic, qid, off, attempts FROM pending "
                "WHERE attempts >= ? AND visible_at <= ? LIMIT ?",
                (floor, now, limit),
            ).fetchall()
            for group, topic, qid, off, attempts in rows:
                if attempts < groups.max_attempts(group, self.max_attempts):
                    continue
                src = RT.source(topic)
                if self._read(topic, qid, off) is None and off >= self.store.min_offset(
                    src, qid
                ):
                    continue  # unreadable now: kept, as at a pop
                self._to_dlq(db, group, topic, qid, off, attempts)
                moved += 1
        return moved

    def forward_dlq(self, group: str, topic: str, handle: str) -> None:
        qid, off, nonce, _deadline = decode_handle(handle)
        topic = RT.key_for(group, topic, nonce)
        with self._write() as db:
            row = db.execute(
                "SELECT attempts FROM pending WHERE grp=? AND topic=? AND qid=? "
                "AND off=? AND nonce=?",
                (group, topic, qid, off, nonce),
            ).fetchone()
            if row is None:
                raise InvalidHandle(STALE)
            self._to_dlq(db, group, topic, qid, off, row[0], DLQ_FORWARDED)

    def stats(self) -> dict[str, Any]:
        """Per ``group@topic``: pending entries, and those in flight (all
        endpoint processes)."""
        if not self.state.is_open:
            return {}
        return {
            f"{g}@{t}": {"pending": pending, "inflight": inflight}
            for g, t, pending, inflight in self.db.execute(
                "SELECT q.grp, q.topic, count(p.off), "
                "coalesce(sum(p.visible_at > ?), 0) FROM queues q "
                "LEFT JOIN pending p ON p.grp=q.grp AND p.topic=q.topic "
                "AND p.qid=q.qid GROUP BY q.grp, q.topic",
                (now_ms(),),
            )
        }
