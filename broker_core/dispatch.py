"""Dispatch: what each appended record tells derived-state builders.

``MessageStore.iter_dispatch(start, end)`` yields one ``DispatchRequest`` per
record in log order, whichever process appended it: a service that keeps
derived state persists ``next_offset`` of the last record it handled and reads
on from there.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from broker_core.message import (
    PROPERTY_DELAY,
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
    decode_properties,
)
from broker_core.record import HEADER, topic_and_properties
from broker_core.tags import tags_code
from broker_core.validation import SCHEDULE_TOPIC

if TYPE_CHECKING:
    from broker_core.metadata import TopicTable


@dataclass(slots=True)
class DispatchRequest:
    """One record as derived-state builders see it (RocketMQ ``DispatchRequest``).

    ``tags_code`` is the consume-queue tag field: the ``TAGS`` hash, or for
    ``SCHEDULE_TOPIC_XXXX`` with a ``DELAY`` property the delivery timestamp.
    ``consume_queue_offset`` is 0 for PREPARED and ROLLBACK records, which have no
    consume-queue unit. The body is not included: call
    ``MessageStore.read_message(commit_log_offset)`` when it is needed.
    """

    topic: str
    queue_id: int
    commit_log_offset: int
    msg_size: int
    tags_code: int
    store_timestamp: int
    consume_queue_offset: int
    keys: str | None
    uniq_key: str | None
    sysflag: int
    prepared_transaction_offset: int
    born_timestamp: int
    reconsume_times: int
    properties: dict[str, str]

    @property
    def next_offset(self) -> int:
        """The log offset after this record: a reader's progress to persist."""
        return self.commit_log_offset + self.msg_size

    def takes_unit(self, topics: TopicTable | None = None) -> bool:
        """Whether the record has a consume-queue unit: a message or a commit
        (not a half, not a rollback), and not a deleted topic's record
        (``topics.hides``: written before the topic was deleted)."""
        return self.sysflag & 0xC in (0, 8) and not (
            topics is not None and topics.hides(self.topic, self.commit_log_offset)
        )


def compute_tags_code(
    topic: str,
    properties: dict[str, str],
    store_ts: int,
    delay_ms: Callable[[int], int],
) -> int:
    """Return the consume-queue tag field of a record."""
    if topic == SCHEDULE_TOPIC:
        raw = properties.get(PROPERTY_DELAY)
        if raw:
            try:
                level = int(raw)
            except ValueError:
                level = 0
            if level > 0:
                return store_ts + (delay_ms(level) or 1000)
    return tags_code(properties.get(PROPERTY_TAGS))


def _property(raw: bytes, marker: bytes) -> str | None:
    """Return the value after ``marker`` (``\x02NAME\x01``) in ``raw``, or None."""
    i = raw.find(marker)
    if i < 0:
        return None
    i += len(marker)
    j = raw.find(b"\x02", i)
    return str(raw[i : j if j >= 0 else len(raw)], "utf-8")


def index_keys(view: memoryview, pos: int) -> tuple[int, int, int, str, list[str]]:
    """Return ``(phys, store_ts, sysflag, topic, keys)`` of the validated record at
    ``view[pos:]``, where ``keys`` are its ``UNIQ_KEY`` and ``KEYS`` tokens.

    The index builder's reader: it finds the two properties in the raw bytes
    instead of decoding every property (``decode_dispatch``).
    """
    head = HEADER.unpack_from(view, pos)
    sysflag = head[7]
    topic, ppos, plen = topic_and_properties(view, pos, head[1], sysflag, head[16])
    raw = b"\x02" + bytes(view[ppos : ppos + plen])
    keys: list[str] = []
    uniq = _property(raw, _UNIQ_AT)
    if uniq:
        keys.append(uniq)
    value = _property(raw, _KEYS_AT)
    if value is not None:
        keys.extend(k for k in value.split(" ") if k)
    return head[6], head[11], sysflag, topic, keys


def iter_index_keys(
    commitlog: Any, start: int, end: int, verify_crc: bool = False
) -> Iterator[tuple[int, int, int, str, list[str]]]:
    """``(phys, size, store_ts, topic, keys)`` of every record of ``commitlog``
    in ``[start, end)``, ``keys`` being what the index takes from it: none
    for a rolled-back half. The index builder's, the full-disk lookup's and
    ``verify``'s one way through the log."""
    for seg, pos, size in commitlog.scan(start, end, verify_crc=verify_crc):
        phys, ts, sysflag, topic, keys = index_keys(seg.view, pos)
        yield phys, size, ts, topic, ([] if sysflag & 0xC == 0xC else keys)


_UNIQ_AT = f"\x02{PROPERTY_UNIQ_KEY}\x01".encode()
_KEYS_AT = f"\x02{PROPERTY_KEYS}\x01".encode()


def decode_dispatch(
    view: memoryview, pos: int, delay_ms: Callable[[int], int]
) -> DispatchRequest:
    """Build the ``DispatchRequest`` of the validated record at ``view[pos:]``."""
    (
        total,
        magic,
        _crc,
        queue_id,
        _flag,
        queue_offset,
        phys,
        sysflag,
        born_ts,
        _bip,
        _bport,
        store_ts,
        _sip,
        _sport,
        reconsume,
        prepared,
        body_len,
    ) = HEADER.unpack_from(view, pos)
    topic, ppos, plen = topic_and_properties(view, pos, magic, sysflag, body_len)
    props = decode_properties(str(view[ppos : ppos + plen], "utf-8"))
    return DispatchRequest(
        topic=topic,
        queue_id=queue_id,
        commit_log_offset=phys,
        msg_size=total,
        tags_code=compute_tags_code(topic, props, store_ts, delay_ms),
        store_timestamp=store_ts,
        consume_queue_offset=queue_offset,
        keys=props.get(PROPERTY_KEYS),
        uniq_key=props.get(PROPERTY_UNIQ_KEY),
        sysflag=sysflag,
        prepared_transaction_offset=prepared,
        born_timestamp=born_ts,
        reconsume_times=reconsume,
        properties=props,
    )


_TAGS_AT = f"\x02{PROPERTY_TAGS}\x01".encode()
_DELAY_AT = f"\x02{PROPERTY_DELAY}\x01".encode()


def queue_unit_fields(
    view: memoryview, pos: int, delay_ms: Callable[[int], int]
) -> tuple[str, int, int, int, int, int]:
    """Return ``(topic, queue_id, queue_offset, sysflag, size, tags_code)`` of
    the validated record at ``view[pos:]``: what a consume-queue unit needs.

    The replica's reader (``ha.replica``): like ``index_keys`` it finds the two
    properties it needs in the raw bytes instead of decoding them all.
    """
    head = HEADER.unpack_from(view, pos)
    sysflag = head[7]
    if sysflag & 0x30:  # IPv6 hosts shift the later fields: the general path
        req = decode_dispatch(view, pos, delay_ms)
        return (req.topic, req.queue_id, req.consume_queue_offset, sysflag,
                req.msg_size, req.tags_code)  # fmt: skip
    topic, ppos, plen = topic_and_properties(view, pos, head[1], sysflag, head[16])
    raw = b"\x02" + bytes(view[ppos : ppos + plen])
    props = {}
    tags = _property(raw, _TAGS_AT)
    if tags:
        props[PROPERTY_TAGS] = tags
    if topic == SCHEDULE_TOPIC:
        delay = _property(raw, _DELAY_AT)
        if delay:
            props[PROPERTY_DELAY] = delay
    code = compute_tags_code(topic, props, head[11], delay_ms)
    return topic, head[3], head[5], sysflag, head[0], code
