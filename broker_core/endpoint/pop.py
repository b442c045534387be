"""Pop consumption for the gRPC endpoint: invisibility, receipt handles,
redelivery with attempts, FIFO message groups, dead letters, persisted state.

All methods run on the endpoint's one consumer thread (``Endpoint.consumer``),
never two at once (no locking), and never on its event loop.

State per (consumer group, topic, queue): a pop ``cursor`` (next offset not yet
read) and ``pending`` (offset -> Entry) for messages read but not acknowledged.
The committed offset is the low-water mark: the smallest pending offset, or the
cursor. ``<store>/grpc/pop.json`` holds cursors and the attempts of pending
offsets; it is written atomically (temp file, fsync, rename) when dirty.

An operator's offset reset (the console) must reach the pop cursor, which
would otherwise override the committed offset: ``request_reset`` leaves a
request under ``<store>/grpc/resets/`` that the endpoint applies within half
a second (or when it next starts).
"""

from __future__ import annotations

import json
import logging
import os
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from broker_core.broker import Broker
from broker_core.errors import StoreError
from broker_core.message import MessageExt, MessageInner, PullStatus
from broker_core.metadata import atomic_write_json

SHARDING_KEY = "__SHARDINGKEY"
RESETS_DIR = Path("grpc") / "resets"

log = logging.getLogger(__name__)


def request_reset(
    store_root: str | os.PathLike[str], group: str, topic: str, offsets: dict[int, int]
) -> Path:
    """Ask the endpoint to restart pop consumption of ``group`` on ``topic`` at
    ``offsets`` (queue id -> offset): in-flight messages of those queues are
    forgotten (their handles go stale) and reading resumes there."""
    directory = Path(store_root) / RESETS_DIR
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{time.time_ns():020d}-{os.getpid()}.json"
    body = {
        "group": group,
        "topic": topic,
        "offsets": {str(q): o for q, o in offsets.items()},
    }
    atomic_write_json(path, body)
    return path


class InvalidHandle(Exception):
    """A receipt handle that is malformed, stale or unknown."""


@dataclass(slots=True)
class Entry:
    offset: int
    msg: MessageExt | None
    group: str | None
    attempts: int = 0
    visible_at: int = 0
    nonce: int = 0


@dataclass(slots=True)
class QState:
    cursor: int
    pending: dict[int, Entry] = field(default_factory=dict)
    committed: int = -1


def now_ms() -> int:
    return int(time.time() * 1000)


def encode_handle(qid: int, offset: int, nonce: int, deadline: int) -> str:
    return f"P1:{qid}:{offset}:{nonce:x}:{deadline}"


def decode_handle(handle: str) -> tuple[int, int, int, int]:
    try:
        tag, qid, off, nonce, deadline = handle.split(":")
        if tag != "P1":
            raise ValueError(tag)
        return int(qid), int(off), int(nonce, 16), int(deadline)
    except (ValueError, AttributeError) as exc:
        raise InvalidHandle(f"malformed receipt handle {handle!r}") from exc


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
        #: read-ahead bound per queue (in flight + waiting for redelivery)
        self.max_pending = max_pending
        self.states: dict[tuple[str, str], dict[int, QState]] = {}
        self.path = self.store.root / "grpc" / "pop.json"
        self.dirty = False
        self.dlq_count = 0
        self._rr = 0
        #: auto-renew handles (push consumers, G7): (group, topic, qid, offset)
        #: -> (client id, invisible ms, renew until ms)
        self.renew: dict[tuple[str, str, int, int], tuple[str, int, int]] = {}
        self._load()
        self.apply_resets()

    # -- persistence ---------------------------------------------------------
    def _load(self) -> None:
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return
        for group, topics in data.items():
            for topic, queues in topics.items():
                qs: dict[int, QState] = {}
                for qid_s, q in queues.items():
                    qid = int(qid_s)
                    st = QState(cursor=int(q["cursor"]))
                    for off_s, attempts in sorted(
                        q.get("pending", {}).items(), key=lambda kv: int(kv[0])
                    ):
                        off = int(off_s)
                        m = self._read(topic, qid, off)
                        if m is None:
                            continue
                        st.pending[off] = Entry(
                            off, m, m.properties.get(SHARDING_KEY), int(attempts)
                        )
                    qs[qid] = st
                self.states[(group, topic)] = qs

    def apply_resets(self) -> int:
        """Apply the offset resets requested since the last look (oldest first)."""
        directory = self.store.root / RESETS_DIR
        try:
            names = sorted(os.listdir(directory))
        except FileNotFoundError:
            return 0
        done = 0
        for name in names:
            if not name.endswith(".json"):
                continue
            path = directory / name
            try:
                req = json.loads(path.read_text())
                group, topic = str(req["group"]), str(req["topic"])
                offsets = {int(q): int(o) for q, o in req["offsets"].items()}
            except (OSError, ValueError, KeyError, TypeError, AttributeError):
                log.warning("ignoring an unreadable offset reset request %s", path)
                path.unlink(missing_ok=True)
                continue
            qs = self._queues(group, topic)
            for qid, off in offsets.items():
                st = qs.get(qid)
                if st is None:
                    continue
                for pending in st.pending:
                    self.renew.pop((group, topic, qid, pending), None)
                st.pending.clear()
                st.cursor = off
                st.committed = -1  # the next save commits the new offset
            self.dirty = True
            path.unlink(missing_ok=True)
            log.info("offset reset applied: %s@%s -> %s", group, topic, offsets)
            done += 1
        return done

    def save(self) -> None:
        if not self.dirty:
            return
        self.dirty = False
        data: dict[str, Any] = {}
        for (group, topic), qs in self.states.items():
            out = data.setdefault(group, {}).setdefault(topic, {})
            for qid, st in qs.items():
                out[str(qid)] = {
                    "cursor": st.cursor,
                    "pending": {str(o): e.attempts for o, e in st.pending.items()},
                }
                low = min(st.pending) if st.pending else st.cursor
                if low != st.committed:
                    try:
                        self.store.commit_offset(group, topic, qid, low)
                        st.committed = low
                    except Exception:  # noqa: BLE001 - best effort mirror
                        pass
        try:
            atomic_write_json(self.path, data)
        except StoreError:
            self.dirty = True  # written on the next save, once there is room
            raise

    # -- helpers -------------------------------------------------------------
    def _read(self, topic: str, qid: int, off: int) -> MessageExt | None:
        try:
            units = self.store.get_queue_units(topic, qid, off, 1)
            if not units:
                return None
            return self.store.read_message(units[0][0])
        except Exception:  # noqa: BLE001
            return None

    def _queues(self, group: str, topic: str) -> dict[int, QState]:
        qs = self.states.get((group, topic))
        if qs is None:
            qs = self.states[(group, topic)] = {}
        self.store.refresh_topics()
        cfg = self.store.topics.topics.get(topic)
        n = cfg.read_queue_nums if cfg else 0
        for qid in range(n):
            if qid not in qs:
                start = self.store.committed_offset(group, topic, qid)
                if start < 0:
                    start = self.store.min_offset(topic, qid)
                qs[qid] = QState(cursor=start, committed=start)
                self.dirty = True
        return qs

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
        """Return up to ``batch`` (queue id, entry) pairs now invisible."""
        qs = self._queues(group, topic)
        if not qs:
            return []
        now = now_ms()
        out: list[tuple[int, Entry]] = []
        qids = sorted(qs)
        self._rr += 1
        start = self._rr % len(qids)
        for qid in qids[start:] + qids[:start]:
            st = qs[qid]
            n = len(st.pending)
            if n < self.max_pending and (
                n < max(batch * 2, 64)
                or sum(1 for e in st.pending.values() if e.visible_at <= now) < batch
            ):
                self._fill(group, topic, qid, st, expression, expression_type)
            blocked: set[str] = set()
            for e in list(st.pending.values()):
                if e.visible_at > now:
                    if e.group is not None:
                        blocked.add(e.group)
                    continue
                if e.attempts >= self.max_attempts:
                    self._to_dlq(group, topic, qid, st, e)
                    continue
                if e.group is not None:
                    if e.group in blocked:
                        continue
                    blocked.add(e.group)
                if e.msg is None:
                    e.msg = self._read(topic, qid, e.offset)
                    if e.msg is None:
                        del st.pending[e.offset]
                        continue
                e.attempts += 1
                e.nonce = random.getrandbits(48)
                e.visible_at = now + invisible_ms
                out.append((qid, e))
                self.dirty = True
                if len(out) >= batch:
                    return out
        return out

    def _fill(
        self,
        group: str,
        topic: str,
        qid: int,
        st: QState,
        expression: str,
        expression_type: str,
    ) -> None:
        r = self.broker.pull(
            group,
            topic,
            qid,
            st.cursor,
            max_messages=self.refill,
            expression=expression,
            expression_type=expression_type,
        )
        if r.status is PullStatus.OFFSET_ILLEGAL:
            st.cursor = r.next_offset
            self.dirty = True
            return
        for m in r.messages:
            st.pending[m.queue_offset] = Entry(
                m.queue_offset, m, m.properties.get(SHARDING_KEY)
            )
        if r.next_offset != st.cursor:
            st.cursor = r.next_offset
            self.dirty = True

    def _to_dlq(self, group: str, topic: str, qid: int, st: QState, e: Entry) -> None:
        m = e.msg or self._read(topic, qid, e.offset)
        if m is not None:
            inner: MessageInner = m.to_inner()
            inner.topic = f"%DLQ%{group}"
            inner.queue_id = 0
            props = dict(inner.properties)
            props["RETRY_TOPIC"] = topic
            props["ORIGIN_MESSAGE_ID"] = props.get("UNIQ_KEY", m.offset_msg_id)
            props["DLQ_ORIGIN_QUEUE"] = str(qid)
            props["DLQ_ORIGIN_OFFSET"] = str(e.offset)
            inner.properties = props
            inner.reconsume_times = e.attempts
            self.store.put_inner(inner)
            self.dlq_count += 1
        st.pending.pop(e.offset, None)
        self.dirty = True

    # -- handles -------------------------------------------------------------
    def _entry(self, group: str, topic: str, handle: str) -> tuple[int, QState, Entry]:
        qid, off, nonce, _deadline = decode_handle(handle)
        qs = self.states.get((group, topic))
        st = qs.get(qid) if qs else None
        e = st.pending.get(off) if st else None
        if st is None or e is None or e.nonce != nonce:
            raise InvalidHandle("the receipt handle is stale or unknown")
        return qid, st, e

    def release(self, group: str, topic: str, got: list[tuple[int, Entry]]) -> None:
        """Make popped entries that never reached the client visible again now:
        their handles become stale and the attempt is not counted."""
        qs = self.states.get((group, topic), {})
        for qid, e in got:
            st = qs.get(qid)
            if st is None or st.pending.get(e.offset) is not e:
                continue  # acknowledged or reset meanwhile
            self.renew.pop((group, topic, qid, e.offset), None)
            e.attempts = max(0, e.attempts - 1)
            e.nonce = random.getrandbits(48)
            e.visible_at = 0
            self.dirty = True

    def ack(self, group: str, topic: str, handle: str) -> None:
        qid, st, e = self._entry(group, topic, handle)
        del st.pending[e.offset]
        self.renew.pop((group, topic, qid, e.offset), None)
        self.dirty = True

    def auto_renew(
        self,
        group: str,
        topic: str,
        got: list[tuple[int, Entry]],
        client_id: str,
        invisible_ms: int,
        max_renew_ms: int,
    ) -> None:
        until = now_ms() + max_renew_ms
        for qid, e in got:
            self.renew[(group, topic, qid, e.offset)] = (client_id, invisible_ms, until)

    def renew_due(self, alive: set[str]) -> int:
        """Extend the invisibility of auto-renew entries of live clients whose
        deadline is near (keeps their handles valid); drop the others."""
        now = now_ms()
        n = 0
        for key, (cid, inv, until) in list(self.renew.items()):
            group, topic, qid, off = key
            st = self.states.get((group, topic), {}).get(qid)
            e = st.pending.get(off) if st else None
            if e is None or cid not in alive or now >= until or e.visible_at <= now:
                del self.renew[key]
                continue
            if e.visible_at - now < min(10_000, inv // 2):
                e.visible_at = now + inv
                n += 1
        return n

    def change_invisible(
        self, group: str, topic: str, handle: str, invisible_ms: int
    ) -> str:
        qid, _st, e = self._entry(group, topic, handle)
        self.renew.pop((group, topic, qid, e.offset), None)
        e.nonce = random.getrandbits(48)
        e.visible_at = now_ms() + invisible_ms
        self.dirty = True
        return encode_handle(qid, e.offset, e.nonce, e.visible_at)

    def forward_dlq(self, group: str, topic: str, handle: str) -> None:
        qid, st, e = self._entry(group, topic, handle)
        self.renew.pop((group, topic, qid, e.offset), None)
        self._to_dlq(group, topic, qid, st, e)

    def stats(self) -> dict[str, Any]:
        return {
            f"{g}@{t}": {
                "pending": sum(len(s.pending) for s in qs.values()),
                "inflight": sum(
                    1
                    for s in qs.values()
                    for e in s.pending.values()
                    if e.visible_at > now_ms()
                ),
            }
            for (g, t), qs in self.states.items()
        }
