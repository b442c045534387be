"""The client facade: ``Broker.open(store_dir, flush=..., **config)``.

Everything outside the store (console, gRPC endpoint, benchmarks) sends, pulls
and administers through this class. Services that need internal writes use
``broker.store`` (a ``MessageStore``).
"""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from broker_core.config import StoreConfig
from broker_core.errors import (
    CorruptRecordError,
    InvalidQueueError,
    MessageNotFoundError,
    TopicNotFoundError,
    ValidationError,
)
from broker_core.filter import TAG, Matcher, build_matcher
from broker_core.groups import GroupConfig
from broker_core.message import (
    PROPERTY_UNIQ_KEY,
    Message,
    MessageExt,
    MessageInner,
    PullResult,
    PullStatus,
    SendResult,
    encode_properties,
)
from broker_core.metadata import MessageType, TopicConfig
from broker_core.msgid import UniqKeyGenerator
from broker_core.record import (
    decode_offset_msg_id,
    intact,
    names_queue_record,
    offset_msg_id,
    parse_host,
)
from broker_core.store import MessageStore, PutItem
from broker_core.tags import parse_subscription, tags_code
from broker_core.validation import (
    FACADE_PROPERTIES,
    is_system_topic,
    validate_body,
    validate_group,
    validate_keys,
    validate_message_id,
    validate_properties,
    validate_properties_size,
    validate_send_topic,
    validate_tag,
)

#: A send hook may rewrite a message before it is stored (delay levels, timers,
#: transactions): it returns the ``MessageInner`` to store instead.
SendHook = Callable[[MessageInner], MessageInner]

_BORN_HOST = "127.0.0.1:0"


#: Topics that hold copies of messages stored first (or finally) elsewhere.
_COPY_TOPICS = ("RMQ_SYS_", "rmq_sys_", "SCHEDULE_TOPIC_XXXX", "%RETRY%", "%DLQ%")


def _holds_copies(topic: str) -> bool:
    """Whether ``topic`` is the broker's own and may hold a copy of a message
    under its id (halves, op records, a discarded half's copy in
    ``TRANS_CHECK_MAX_TIME_TOPIC``, schedule copies, retries, dead letters)."""
    return is_system_topic(topic) or topic.startswith(_COPY_TOPICS)


class Broker:
    """An open broker store. Use ``Broker.open``; close it or use ``with``."""

    def __init__(self, store: MessageStore) -> None:
        self.store = store
        self.config = store.config
        self._ids = UniqKeyGenerator()
        self._rr: dict[str, itertools.count[int]] = {}
        self._valid_topics: set[str] = set()
        self._hooks: list[SendHook] = []
        self._hook_names: set[str] = set()
        self._born_ip, self._born_port = parse_host(_BORN_HOST)
        self._id_prefix = offset_msg_id(store.store_ip, store.store_port, 0)[:16]

    @classmethod
    def open(
        cls, store_dir: str | os.PathLike[str], flush: str = "async", **config: Any
    ) -> Broker:
        """Open (creating or recovering) the store in ``store_dir``.

        ``flush`` is "async" or "sync"; ``config`` keys are ``StoreConfig`` fields
        (``segment_size``, ``flush_interval_ms``, ``auto_create_topic``,
        ``default_queue_nums``, ``max_message_size``, ``message_delay_level`` ...).
        Raises ``ValidationError`` for bad settings, ``StoreError`` if unusable.
        """
        cfg = StoreConfig.from_kwargs(flush=flush, **config)
        return cls(MessageStore(Path(store_dir), cfg))

    def close(self) -> None:
        """Flush and close; safe to call twice."""
        self.store.close()

    def __enter__(self) -> Broker:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def add_send_hook(self, hook: SendHook, name: str = "") -> bool:
        """Let ``hook`` rewrite every client message before it is stored;
        with a ``name``, only once per broker (False if a hook of that name
        is installed already).

        A hook with a ``needs(topic, encoded_properties)`` attribute is called
        only for the messages for which that returns True."""
        if name:
            if name in self._hook_names:
                return False
            self._hook_names.add(name)
        self._hooks.append(hook)
        return True

    def has_send_hook(self, name: str) -> bool:
        """Whether a hook was installed under ``name`` (``add_send_hook``)."""
        return name in self._hook_names

    # -- sending -------------------------------------------------------------
    def _prepare(self, m: Message, uniq: str, now: int) -> PutItem:
        """Validate one message and build its append item (the send hot path)."""
        topic = m.topic
        if m.msg_id is not None:
            validate_message_id(m.msg_id)
        if topic not in self._valid_topics:
            validate_send_topic(topic)
            if len(self._valid_topics) < 100_000:
                self._valid_topics.add(topic)
        cfg = self.store.topics.topics.get(topic)
        if cfg is not None:
            cfg.check_writable()
        body = m.body
        limit = self.config.max_message_size
        if body.__class__ is not bytes or not 0 < len(body) <= limit:
            validate_body(body, limit)
            body = bytes(body)
        qid = m.queue_id
        if qid is None:
            counter = self._rr.get(topic)
            if counter is None:
                counter = self._rr[topic] = itertools.count()
            nq = cfg.write_queue_nums if cfg else self.config.default_queue_nums
            qid = next(counter) % nq
        elif qid < 0:
            raise InvalidQueueError(f"queue id {qid} is negative")
        tags = m.tags
        if tags is not None:
            validate_tag(tags)
        if m.properties or m.keys:
            # Nothing a caller gives may carry the codec's separators (it
            # would inject properties) or a system name the facade does not
            # take from its caller.
            validate_properties(m.properties, FACADE_PROPERTIES)
            validate_keys(m.keys)
            parts: list[str] = []
            if m.properties:
                parts.append(encode_properties(m.properties))
            if tags:
                parts.append(f"TAGS\x01{tags}\x02")
            keys = m.keys
            if keys:
                ks = keys if isinstance(keys, str) else " ".join(keys)
                parts.append(f"KEYS\x01{ks}\x02")
            parts.append(f"UNIQ_KEY\x01{uniq}\x02")
            pb = "".join(parts).encode()
        elif tags:
            pb = f"TAGS\x01{tags}\x02UNIQ_KEY\x01{uniq}\x02".encode()
        else:
            pb = f"UNIQ_KEY\x01{uniq}\x02".encode()
        if len(pb) > self.config.max_properties_size:
            # A tag alone counts too (a 1 MiB tag was an internal error).
            validate_properties_size(pb, self.config.max_properties_size)
        return (
            topic,
            qid,
            body,
            pb,
            tags_code(tags) if tags else 0,
            0,
            m.flag,
            0,
            now,
            self._born_ip,
            self._born_port,
            0,
            0,
        )

    def validate(self, message: Message) -> None:
        """Run every check ``send`` runs on ``message``; store nothing."""
        self._prepare(message, message.msg_id or "0", int(time.time() * 1000))

    def send(self, message: Message) -> SendResult:
        """Store one message; return its ids, queue and offset.

        Raises ``InvalidTopicError``, ``TopicNotAllowedError``, ``InvalidMessageError``,
        ``MessageTooLargeError``, ``InvalidQueueError``, ``TopicNotFoundError`` (when
        ``auto_create_topic`` is off). With ``flush="sync"`` the status is
        ``FLUSH_DISK_TIMEOUT`` if the disk did not confirm in time.
        """
        return self.send_batch((message,))[0]

    def send_batch(
        self, messages: Sequence[Message], blocking: bool = True
    ) -> list[SendResult]:
        """Store messages atomically in order under one lock and one write.

        Every message is validated before anything is written. With
        ``blocking=False``, ``AppendBusyError`` (nothing stored) instead of
        waiting for another appender or a sync flush.
        """
        self.store.refresh_topics()  # queue counts changed by another process
        now = int(time.time() * 1000)
        if len(messages) == 1:
            uniqs = [messages[0].msg_id or self._ids.next(now)]
        else:
            uniqs = self._ids.next_many(len(messages), now)
            uniqs = [m.msg_id or u for m, u in zip(messages, uniqs, strict=True)]
        items = [self._prepare(m, u, now) for m, u in zip(messages, uniqs, strict=True)]
        if self._hooks:
            items = self._apply_hooks(items)
        offsets, _sizes, qoffs, _now, status = self.store.append_items(
            items, auto_create=self.config.auto_create_topic, blocking=blocking
        )
        prefix = self._id_prefix
        return [
            SendResult(u, f"{prefix}{off:016X}", it[1], q, status, it[0], off)
            for u, off, q, it in zip(uniqs, offsets, qoffs, items, strict=True)
        ]

    def _apply_hooks(self, items: list[PutItem]) -> list[PutItem]:
        from broker_core.message import decode_properties

        out: list[PutItem] = []
        for it in items:
            # A hook that says what it needs (``hook.needs(topic, encoded
            # properties)``) is skipped for other messages: no decode and
            # re-encode of every message's properties.
            if all(
                getattr(h, "needs", None) is not None and not h.needs(it[0], it[3])  # type: ignore[attr-defined]
                for h in self._hooks
            ):
                out.append(it)
                continue
            inner = MessageInner(
                topic=it[0],
                queue_id=it[1],
                body=it[2],
                properties=decode_properties(it[3].decode()),
                flag=it[6],
                sysflag=it[7],
                born_timestamp=it[8],
            )
            for hook in self._hooks:
                inner = hook(inner)
            out.extend(self.store.prepare_inner([inner]))
        return out

    # -- consuming -----------------------------------------------------------
    def pull(
        self,
        group: str,
        topic: str,
        queue_id: int,
        offset: int,
        max_messages: int = 32,
        expression: str | None = "*",
        expression_type: str | None = None,
        deadline: float | None = None,
    ) -> PullResult:
        """Read up to ``max_messages`` from a queue starting at logical ``offset``.

        ``expression`` is a tag subscription (``*`` or ``a || b``), or with
        ``expression_type="SQL92"`` an SQL92 selector over the message's
        properties (``broker_core.filter.build_matcher``: only TRUE matches;
        ``FilterSyntaxError`` for a bad expression). Statuses:
        FOUND, NO_NEW_MSG (offset == max), NO_MATCHED_MSG (all filtered out;
        ``next_offset`` skips them), OFFSET_ILLEGAL (outside [min, max];
        ``next_offset`` is the nearest valid offset). Raises ``InvalidGroupError``,
        ``TopicNotFoundError``, ``InvalidQueueError``, ``ValidationError``.

        A filtered read scans at most ``max(16 x max_messages, 512)`` units;
        with ``deadline`` (a ``time.monotonic()`` value) it also stops after
        the first SQL92 evaluation (or tag-filtered batch of 256 units) that
        ends past it, so an expensive filter over many non-matching messages
        holds the reading thread a bounded time (``next_offset`` says where
        to go on).
        """
        validate_group(group)
        store = self.store
        store.refresh_topics()
        cfg = store.topics.topics.get(topic)
        if cfg is None:
            cfg = store.get_topic(topic)
        if not 0 <= queue_id < cfg.queue_nums:
            raise InvalidQueueError(
                f"queue id {queue_id} is out of range for {topic!r}"
            )
        if max_messages < 1:
            raise ValidationError("max_messages must be at least 1")
        sql: Matcher | None = None
        if expression_type is not None and expression_type.upper() != TAG:
            sql = build_matcher(expression_type, expression)
            expression = "*"
        flt = parse_subscription(expression)
        cq = store.cqs.get(topic, queue_id)
        lo, hi = cq.min_offset(), cq.max_offset()
        if offset < lo or offset > hi:
            nxt = lo if offset < lo else hi
            return PullResult([], nxt, PullStatus.OFFSET_ILLEGAL, lo, hi)
        if offset == hi:
            return PullResult([], hi, PullStatus.NO_NEW_MSG, lo, hi)
        decode = store.commitlog.decode_at
        msgs: list[MessageExt] = []
        pos = offset
        if flt.match_all and sql is None:
            units = cq.read_units(offset, max_messages)
            msgs = self._fast_read(units, queue_id, offset)
            if len(msgs) < len(units) or len(units) < min(max_messages, hi - offset):
                # A unit was stepped over or read as the end: a damaged record,
                # or damaged units (rebuilt from the log here, read again).
                units = store.get_queue_units(topic, queue_id, offset, max_messages)
                msgs = self._fast_read(units, queue_id, offset)
            pos += len(units)
        else:
            budget = max(max_messages * 16, 512)
            while len(msgs) < max_messages and pos < hi and budget > 0:
                units = store.get_queue_units(topic, queue_id, pos, min(budget, 256))
                if not units:
                    break
                late = False
                for phys, _size, code in units:
                    pos += 1
                    budget -= 1
                    if flt.matches_code(code):
                        try:
                            m = decode(phys, _size)
                        except MessageNotFoundError:
                            continue  # damaged: stepped over, see quarantine/
                        if flt.matches_tag(m.tags) and (
                            sql is None or sql(m.properties)
                        ):
                            msgs.append(m)
                            if len(msgs) >= max_messages:
                                break
                        if (
                            sql is not None
                            and deadline is not None
                            and time.monotonic() > deadline
                        ):
                            # One evaluation may be costly (CONTAINS over long
                            # values): checked after each one, not each batch.
                            late = True
                            break
                if late or (deadline is not None and time.monotonic() > deadline):
                    break
        status = PullStatus.FOUND if msgs else PullStatus.NO_MATCHED_MSG
        return PullResult(msgs, pos, status, lo, hi)

    def _fast_read(
        self, units: list[tuple[int, int, int]], queue_id: int, first: int
    ) -> list[MessageExt]:
        """The records of ``units`` (queue offsets ``first``...), each checked
        to be the record written at its queue offset of ``queue_id`` (a
        damaged one, or a unit naming another record, is stepped over):
        copied straight out of the segment when one holds them all."""
        if not units:
            return []
        store = self.store
        seg = store.commitlog.segments.segment(units[0][0])
        if seg is None or units[0][0] < 0 or units[-1][0] >= seg.base + seg.size:
            found = (self._checked(u, queue_id, first + i) for i, u in enumerate(units))
            return [m for m in found if m is not None]
        # One segment holds them all: copy each record straight out, checked
        # first (a damaged one is stepped over).
        view, base = seg.view, seg.base
        trusted = store.state.trusted_from
        msgs = [
            MessageExt(bytes(view[p - base : p - base + n]))
            for q, (p, n, _code) in enumerate(units, first)
            if names_queue_record(view, p - base, n, p, queue_id, q)
            and (p >= trusted or intact(view, p - base, n, p))
        ]
        return msgs

    def _checked(
        self, unit: tuple[int, int, int], queue_id: int, q: int
    ) -> MessageExt | None:
        """Decode a unit's record, or None if it is damaged (see ``quarantine/``)
        or not the record written at queue offset ``q`` of ``queue_id``."""
        try:
            m = self.store.commitlog.decode_at(unit[0], unit[1])
        except MessageNotFoundError:
            return None
        return m if (m.queue_id, m.queue_offset) == (queue_id, q) else None

    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """Persist a group's next offset on a queue (``MessageStore.commit_offset``)."""
        self.store.commit_offset(group, topic, queue_id, offset)

    def committed_offset(self, group: str, topic: str, queue_id: int) -> int:
        """Return a group's committed offset on a queue, or -1 if none."""
        return self.store.committed_offset(group, topic, queue_id)

    # -- look-ups ------------------------------------------------------------
    def get_message(self, msg_id: str, topic: str | None = None) -> MessageExt:
        """Return a message by offset id or ``UNIQ_KEY`` (optionally within ``topic``).

        Raises ``MessageNotFoundError`` (``CorruptRecordError`` for a damaged
        record at an offset id's place).
        """
        decoded = decode_offset_msg_id(msg_id)
        if decoded is not None:
            try:
                msg = self.store.read_message(decoded[1])
            except CorruptRecordError:
                raise  # the record is there, damaged: say so, serve nothing
            except MessageNotFoundError:
                msg = None
            if msg is not None and msg.offset_msg_id == msg_id.upper():
                return msg
        if topic:
            topics = [topic]
        else:
            # A message's own topic before the system ones that hold copies
            # under the same id (a transaction's half, a delayed message's
            # schedule copy, retries and dead letters): the delivered message.
            names = [t.topic_name for t in self.store.list_topics()]
            topics = sorted(names, key=_holds_copies)
        for t in topics:
            for msg in self.records_with_id(t, msg_id):
                return msg
        raise MessageNotFoundError(f"no message with id {msg_id!r}")

    def records_with_id(self, topic: str, msg_id: str) -> Iterator[MessageExt]:
        """The readable records of ``topic`` whose ``UNIQ_KEY`` is ``msg_id``
        (a message and the copies a retry or dead-letter topic holds of it),
        as the index finds them."""
        for off in self.store.index_query(f"{topic}#{msg_id}", 0, 1 << 62, 64):
            try:
                msg = self.store.read_message(off)
            except MessageNotFoundError:
                continue
            if msg.topic == topic and msg.properties.get(PROPERTY_UNIQ_KEY) == msg_id:
                yield msg

    def query_by_key(
        self,
        topic: str,
        key: str,
        begin_ms: int = 0,
        end_ms: int | None = None,
        max_messages: int = 32,
    ) -> list[MessageExt]:
        """Return messages of ``topic`` whose KEYS (or UNIQ_KEY) include ``key``,
        stored within ``[begin_ms, end_ms]``, oldest first, at most ``max_messages``."""
        end = (1 << 62) if end_ms is None else end_ms
        seen: set[int] = set()
        out: list[MessageExt] = []
        for off in self.store.index_query(
            f"{topic}#{key}", begin_ms, end, max_messages * 4
        ):
            if off in seen:
                continue
            seen.add(off)
            try:
                msg = self.store.read_message(off)
            except MessageNotFoundError:
                continue
            keys = (msg.keys or "").split(" ")
            if msg.topic != topic or not (
                key in keys or msg.properties.get(PROPERTY_UNIQ_KEY) == key
            ):
                continue
            if begin_ms <= msg.store_timestamp <= end:
                out.append(msg)
        out.sort(key=lambda m: m.commit_log_offset)
        return out[-max_messages:] if len(out) > max_messages else out

    # -- administration ------------------------------------------------------
    def create_topic(
        self,
        topic: str,
        read_queue_nums: int = 4,
        write_queue_nums: int | None = None,
        perm: int = 6,
        message_type: str = MessageType.NORMAL.value,
    ) -> TopicConfig:
        """Create a topic (see ``MessageStore.create_topic``)."""
        return self.store.create_topic(
            topic, read_queue_nums, write_queue_nums, perm, message_type
        )

    def update_topic(self, topic: str, **changes: Any) -> TopicConfig:
        """Update ``read_queue_nums``, ``write_queue_nums``, ``perm``, type."""
        return self.store.update_topic(topic, **changes)

    def put_group(
        self, group: str, fifo: bool = False, max_delivery_attempts: int | None = None
    ) -> GroupConfig:
        """Create or change a consumer group's settings (``groups.GroupRegistry``)."""
        return self.store.groups.put(group, fifo, max_delivery_attempts)

    def list_groups(self) -> list[GroupConfig]:
        return self.store.groups.all()

    def delete_topic(self, topic: str) -> None:
        self._valid_topics.discard(topic)
        self._rr.pop(topic, None)
        self.store.delete_topic(topic)

    def list_topics(self) -> list[TopicConfig]:
        return self.store.list_topics()

    def stats(self) -> dict[str, Any]:
        """Return positions, sizes and per-topic queue depths."""
        s = self.store
        topics = {}
        for cfg in s.list_topics():
            depths = [s.max_offset(cfg.topic_name, q) for q in range(cfg.queue_nums)]
            topics[cfg.topic_name] = {
                "queues": cfg.queue_nums,
                "messages": sum(depths),
                "depths": depths,
            }
        st = s.state
        return {
            "store_dir": str(s.root),
            "flush": s.config.flush,
            "commit_offset": st.commit_pos,
            "dispatched_offset": st.dispatched_pos,
            "flushed_offset": st.flushed_pos,
            "indexed_offset": st.indexed_pos,
            "segments": len(s.commitlog.segments.list_bases()),
            "segment_size": s.config.segment_size,
            "fsyncs": s.flusher.fsync_count,
            "topics": topics,
            "recovery": None
            if s.recovery_info is None
            else {
                "abnormal": s.recovery_info.abnormal,
                "log_end": s.recovery_info.log_end,
                "truncated": s.recovery_info.truncated,
                "seconds": round(s.recovery_info.seconds, 4),
            },
        }


__all__ = ["Broker", "SendHook", "TopicNotFoundError"]
