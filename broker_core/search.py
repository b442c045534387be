"""Message search for the console and the API.

``search_messages(broker, MessageQuery(...), limit, cursor, scan_budget)`` finds
messages by id, by key or by topic and store-time range, optionally filtered by
a tag expression and an SQL92 selector, newest (most recently stored) first.
A call examines at most ``scan_budget`` candidates and returns a page with an
opaque cursor to continue; the cursor is None when the search is complete.

The SQL92 selector sees every message property as a string (``TAGS``,
``KEYS``, ``UNIQ_KEY``, user properties) and these system fields as typed
values, which take precedence over a property of the same name: ``topic``
(string), ``queueId``, ``queueOffset``, ``commitLogOffset``, ``bornTimestamp``,
``storeTimestamp``, ``storeSize``, ``reconsumeTimes``, ``sysFlag`` (numbers).

A topic scan walks the topic's consume queues backwards, merged by commit-log
offset, and reads only the header and properties of each candidate record;
tag filters are first checked against the consume queue's tag hash code.
"""

from __future__ import annotations

import base64
import binascii
import bisect
import hashlib
import json
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import chain
from typing import Any

from broker_core.broker import Broker
from broker_core.errors import (
    FilterEvaluationError,
    InvalidQueueError,
    MessageNotFoundError,
    ValidationError,
)
from broker_core.filter import Selector, compile
from broker_core.filter.props import find_property
from broker_core.message import MessageExt
from broker_core.record import (
    HEADER,
    MAGIC_V1,
    STORE_TIMESTAMP_AT,
    SYSFLAG_BORNHOST_V6,
    SYSFLAG_STOREHOST_V6,
    intact,
)
from broker_core.tags import TagFilter, parse_subscription

# Fields of ``record.HEADER`` (IPv4 hosts) by index: 7 sysFlag, 11
# storeTimestamp, 16 bodyLength; the body follows the header, then the topic
# and the properties.
_STORE_TS = struct.Struct(">q")
_V6_HOSTS = SYSFLAG_BORNHOST_V6 | SYSFLAG_STOREHOST_V6

#: Typed system fields visible to an SQL92 search filter.
SYSTEM_FIELDS = frozenset(
    (
        "topic",
        "queueId",
        "queueOffset",
        "commitLogOffset",
        "bornTimestamp",
        "storeTimestamp",
        "storeSize",
        "reconsumeTimes",
        "sysFlag",
    )
)
# Store timestamps are taken in append order, so they rise along a queue; the
# slack absorbs small steps back (several writer processes, clock adjustments).
TIME_SLACK_MS = 1000
_BATCH = 512
#: A consume-queue unit in a scan: (phys, size, tag code, queue id, queue offset).
_Unit = tuple[int, int, int, int, int]
_NO_END = 1 << 62
_EMPTY: dict[str, object] = {}


@dataclass(frozen=True, slots=True)
class MessageQuery:
    """What to search for.

    Exactly one way in: ``msg_id`` (offset id or ``UNIQ_KEY``), ``key`` (a key of
    ``KEYS``; all topics when ``topic`` is None) or ``topic`` (a scan of its
    queues, or of ``queue_id`` only). ``begin_ms``/``end_ms`` bound the store
    time (inclusive); ``tag`` is a tag expression (``a || b``); ``sql`` an
    SQL92 selector. All filters must match.
    """

    topic: str | None = None
    msg_id: str | None = None
    key: str | None = None
    queue_id: int | None = None
    begin_ms: int | None = None
    end_ms: int | None = None
    tag: str | None = None
    sql: str | None = None

    def fingerprint(self) -> str:
        """Return a short digest tying a cursor to this query."""
        return hashlib.sha1(repr(self).encode()).hexdigest()[:12]


@dataclass(slots=True)
class SearchPage:
    """One page of results, newest first."""

    messages: list[MessageExt]
    #: Pass back to continue; None when nothing is left to examine.
    cursor: str | None
    #: Candidates examined by this call (consume-queue units or index hits).
    scanned: int
    #: Messages whose SQL92 evaluation failed (counted as no match).
    errors: int = 0


def message_fields(msg: MessageExt) -> dict[str, object]:
    """Return the typed system fields of ``msg`` (see ``SYSTEM_FIELDS``)."""
    return {
        "topic": msg.topic,
        "queueId": msg.queue_id,
        "queueOffset": msg.queue_offset,
        "commitLogOffset": msg.commit_log_offset,
        "bornTimestamp": msg.born_timestamp,
        "storeTimestamp": msg.store_timestamp,
        "storeSize": msg.store_size,
        "reconsumeTimes": msg.reconsume_times,
        "sysFlag": msg.sysflag,
    }


# Where each system field sits in a record.HEADER tuple (topic, -1, is not in it).
_HEAD_INDEX = {
    "topic": -1,
    "queueId": 3,
    "queueOffset": 5,
    "commitLogOffset": 6,
    "bornTimestamp": 8,
    "storeTimestamp": 11,
    "storeSize": 0,
    "reconsumeTimes": 14,
    "sysFlag": 7,
}


def _encode_cursor(data: dict[str, Any]) -> str:
    raw = json.dumps(data, separators=(",", ":"), sort_keys=True).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode_cursor(cursor: str, fingerprint: str) -> dict[str, Any]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        data = json.loads(raw)
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise ValidationError("invalid search cursor") from None
    if not isinstance(data, dict) or data.get("f") != fingerprint:
        raise ValidationError("the search cursor belongs to another query")
    return data


class _Filters:
    """The time, tag and SQL92 tests of a query."""

    def __init__(self, query: MessageQuery) -> None:
        self.begin = query.begin_ms if query.begin_ms is not None else -_NO_END
        self.end = query.end_ms if query.end_ms is not None else _NO_END
        if self.begin > self.end:
            raise ValidationError("begin_ms is after end_ms")
        tag = parse_subscription(query.tag) if query.tag is not None else None
        self.tag: TagFilter | None = None if tag is None or tag.match_all else tag
        self.selector: Selector | None = None
        self.typed = False
        if query.sql is not None:
            self.selector = compile(query.sql)
            self.typed = bool(self.selector.properties & SYSTEM_FIELDS)
        self.errors = 0

    def accept(self, msg: MessageExt) -> bool:
        """Return whether a decoded message passes every test."""
        if not self.begin <= msg.store_timestamp <= self.end:
            return False
        props = msg.properties
        if self.tag is not None and props.get("TAGS") not in self.tag.tags:
            return False
        if self.selector is None:
            return True
        ctx = {**props, **message_fields(msg)} if self.typed else props
        try:
            return self.selector.evaluate(ctx) is True
        except FilterEvaluationError:
            self.errors += 1
            return False


def search_messages(
    broker: Broker,
    query: MessageQuery,
    limit: int = 20,
    cursor: str | None = None,
    scan_budget: int = 100_000,
) -> SearchPage:
    """Return up to ``limit`` messages matching ``query``, newest first.

    ``cursor`` continues a previous call with the same query. Raises
    ``ValidationError`` (bad limits, time range or cursor, no topic, id or
    key), ``TopicNotFoundError``, ``InvalidQueueError`` and
    ``FilterSyntaxError`` (an invalid ``sql``).
    """
    if limit < 1:
        raise ValidationError("limit must be at least 1")
    if scan_budget < 1:
        raise ValidationError("scan_budget must be at least 1")
    filters = _Filters(query)
    state = _decode_cursor(cursor, query.fingerprint()) if cursor else None
    if query.msg_id is not None:
        return _by_id(broker, query, filters)
    if query.key is not None:
        return _by_key(broker, query, filters, limit, state, scan_budget)
    if query.topic is None:
        raise ValidationError("a search needs a topic, a message id or a key")
    return _TopicScan(broker, query, filters).run(limit, state, scan_budget)


def _by_id(broker: Broker, query: MessageQuery, filters: _Filters) -> SearchPage:
    try:
        msg = broker.get_message(query.msg_id or "", query.topic)
    except MessageNotFoundError:
        return SearchPage([], None, 1)
    ok = (query.queue_id is None or msg.queue_id == query.queue_id) and filters.accept(
        msg
    )
    return SearchPage([msg] if ok else [], None, 1, filters.errors)


def _by_key(
    broker: Broker,
    query: MessageQuery,
    filters: _Filters,
    limit: int,
    state: dict[str, Any] | None,
    budget: int,
) -> SearchPage:
    key = query.key or ""
    if query.topic is not None:
        topics = [broker.store.get_topic(query.topic).topic_name]
    else:
        topics = [t.topic_name for t in broker.list_topics()]
    below = int(state["o"]) if state else _NO_END
    end = None if query.end_ms is None else query.end_ms
    found: list[MessageExt] = []
    for topic in topics:
        begin = max(query.begin_ms or 0, 0)
        found += broker.query_by_key(topic, key, begin, end, budget)
    found.sort(key=lambda m: m.commit_log_offset, reverse=True)
    out: list[MessageExt] = []
    scanned = 0
    last = None
    for msg in found:
        if msg.commit_log_offset >= below:
            continue
        if scanned >= budget or len(out) >= limit:
            break
        scanned += 1
        last = msg.commit_log_offset
        if query.queue_id is not None and msg.queue_id != query.queue_id:
            continue
        if filters.accept(msg):
            out.append(msg)
    more = last is not None and any(m.commit_log_offset < last for m in found)
    nxt = _encode_cursor({"f": query.fingerprint(), "o": last}) if more else None
    return SearchPage(out, nxt, scanned, filters.errors)


class _TopicScan:
    """A newest-first scan of a topic's consume queues."""

    def __init__(self, broker: Broker, query: MessageQuery, filters: _Filters) -> None:
        self.store = broker.store
        self.query = query
        self.filters = filters
        cfg = self.store.get_topic(query.topic or "")
        self.topic = cfg.topic_name
        if query.queue_id is not None:
            if not 0 <= query.queue_id < cfg.queue_nums:
                raise InvalidQueueError(f"queue id {query.queue_id} is out of range")
            self.queues = [query.queue_id]
        else:
            self.queues = list(range(cfg.queue_nums))
        self.segments = self.store.commitlog.segments

    def _store_ts(self, queue_id: int, offset: int) -> int:
        phys, _size, _ = self.store.get_queue_units(self.topic, queue_id, offset, 1)[0]
        seg = self.segments.segment(phys)
        if seg is None:
            return 0
        # Unchecked on purpose: only the bisection by time reads it, and a
        # damaged record's timestamp misplaces at most that one step.
        at = phys - seg.base + STORE_TIMESTAMP_AT
        return int(_STORE_TS.unpack_from(seg.view, at)[0])

    def _first_after(self, queue_id: int, lo: int, hi: int, ts: int) -> int:
        """Return the first offset in [lo, hi) stored after ``ts`` (hi if none)."""
        while lo < hi:
            mid = (lo + hi) // 2
            if self._store_ts(queue_id, mid) > ts:
                hi = mid
            else:
                lo = mid + 1
        return lo

    def _bounds(self, queue_id: int, state: dict[str, Any] | None) -> tuple[int, int]:
        lo = self.store.min_offset(self.topic, queue_id)
        hi = self.store.max_offset(self.topic, queue_id)
        f = self.filters
        if state is not None:
            hi = min(hi, int(state["q"].get(str(queue_id), lo)))
        elif f.end != _NO_END:
            hi = self._first_after(queue_id, lo, hi, f.end + TIME_SLACK_MS)
        if f.begin != -_NO_END:
            lo = self._first_after(queue_id, lo, hi, f.begin - TIME_SLACK_MS - 1)
        return lo, hi

    def _read_desc(self, queue_id: int, lo: int, hi: int) -> list[_Unit]:
        """Return units ``[max(lo, hi - batch), hi)``, newest first."""
        start = max(lo, hi - _BATCH)
        units = self.store.get_queue_units(self.topic, queue_id, start, hi - start)
        out = [(*u, queue_id, start + k) for k, u in enumerate(units)]
        out.reverse()
        return out

    def _merged(self, bounds: dict[int, tuple[int, int]]) -> Iterator[list[_Unit]]:
        """Yield batches of the units in ``bounds``, by descending commit-log offset.

        Queues are read in batches; each round emits, in one sort, every
        buffered unit newer than the oldest buffered unit of any queue that
        still has unread units, so nothing newer can follow.
        """
        los = {q: lo for q, (lo, _hi) in bounds.items()}
        his = {q: hi for q, (_lo, hi) in bounds.items()}
        bufs: dict[int, list[_Unit]] = {}

        def fill(q: int) -> None:
            units = self._read_desc(q, los[q], his[q]) if his[q] > los[q] else []
            if units:
                bufs[q] = units
                his[q] = max(los[q], his[q] - _BATCH)
            else:
                bufs.pop(q, None)
                his[q] = los[q]  # a gap (purged or unwritten units) ends the queue

        for q in bounds:
            fill(q)
        while bufs:
            floor = max(
                (b[-1][0] for q, b in bufs.items() if his[q] > los[q]), default=-1
            )
            batch: list[_Unit] = []
            for q in list(bufs):
                buf = bufs[q]
                cut = bisect.bisect_right(buf, -floor, key=lambda u: -u[0])
                batch += buf[:cut]
                del buf[:cut]
                if not buf:
                    fill(q)
            batch.sort(reverse=True)
            yield batch

    # -- the scan ------------------------------------------------------------
    def run(self, limit: int, state: dict[str, Any] | None, budget: int) -> SearchPage:
        bounds = {q: self._bounds(q, state) for q in self.queues}
        nexts = {q: hi for q, (_lo, hi) in bounds.items()}
        f = self.filters
        tags = f.tag.tags if f.tag is not None else None
        codes = f.tag.codes if f.tag is not None else None
        evaluator = f.selector.text_evaluator if f.selector is not None else None
        refs = (
            [(n, _HEAD_INDEX[n]) for n in f.selector.properties & SYSTEM_FIELDS]
            if f.selector is not None
            else []
        )
        begin, end = f.begin, f.end
        segment = self.segments.segment
        decode_at = self.store.commitlog.decode_at
        topic = self.topic
        head_size = HEADER.size
        unpack = HEADER.unpack_from
        out: list[MessageExt] = []
        found = scanned = 0
        seg_lo = seg_hi = 0
        view = memoryview(b"")
        for phys, size, code, q, qoff in chain.from_iterable(self._merged(bounds)):
            if scanned >= budget or found >= limit:
                break
            scanned += 1
            nexts[q] = qoff
            if codes is not None and code not in codes:
                continue
            if not seg_lo <= phys < seg_hi:
                seg = segment(phys)
                if seg is None:
                    continue  # purged under the scan
                view, seg_lo = seg.view, seg.base
                seg_hi = seg_lo + len(view)
            pos = phys - seg_lo
            if not intact(view, pos, size, phys):
                continue  # damaged: never decoded, never shown (see quarantine/)
            h = unpack(view, pos)
            if h[7] & _V6_HOSTS:
                msg = decode_at(phys, size)
                if f.accept(msg):
                    out.append(msg)
                    found += 1
                continue
            if not begin <= h[11] <= end:
                continue
            at = pos + head_size + h[16]
            if h[1] == MAGIC_V1:
                at += 1 + view[at]
            else:
                at += 2 + ((view[at] << 8) | view[at + 1])
            plen = (view[at] << 8) | view[at + 1]
            text = str(view[at + 2 : at + 2 + plen], "utf-8")
            if tags is not None and find_property(text, "TAGS") not in tags:
                continue
            if evaluator is not None:
                typed = (
                    {n: topic if i < 0 else h[i] for n, i in refs} if refs else _EMPTY
                )
                try:
                    if evaluator(text, typed) is not True:
                        continue
                except FilterEvaluationError:
                    f.errors += 1
                    continue
            out.append(decode_at(phys, size))
            found += 1
        done = all(nexts[q] <= lo for q, (lo, _hi) in bounds.items())
        nxt = None
        if not done:
            nxt = _encode_cursor(
                {
                    "f": self.query.fingerprint(),
                    "q": {str(q): n for q, n in nexts.items()},
                }
            )
        return SearchPage(out, nxt, scanned, f.errors)
