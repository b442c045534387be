"""Message value types of the store: what callers send, what pulls return.

``Message`` is the client view; ``MessageInner`` is the fully specified form that
the store appends (the facade builds one per ``Message``; transaction and
schedule services build their own through ``MessageStore.put_inner``).
``MessageExt`` is a decoded commit-log record.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass, field

# The record layout is owned by ``record``; the host-width bits are part of it.
from broker_core.record import (
    HEADER_SIZE,
    MAGIC_V1,
    SYSFLAG_AT,
    V4_BODY_LEN_AT,
    format_host,
    header_layout,
)
from broker_core.record import SYSFLAG_BORNHOST_V6 as SYSFLAG_BORNHOST_V6
from broker_core.record import SYSFLAG_STOREHOST_V6 as SYSFLAG_STOREHOST_V6

# Property keys (RocketMQ ``MessageConst``).
PROPERTY_TAGS = "TAGS"
PROPERTY_KEYS = "KEYS"
PROPERTY_UNIQ_KEY = "UNIQ_KEY"
PROPERTY_DELAY = "DELAY"
PROPERTY_REAL_TOPIC = "REAL_TOPIC"
PROPERTY_REAL_QID = "REAL_QID"
PROPERTY_TRANSACTION_PREPARED = "TRAN_MSG"
PROPERTY_PRODUCER_GROUP = "PGROUP"

# Separators of the properties string (``MessageDecoder``).
NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"

# sysFlag bits (``MessageSysFlag``).
SYSFLAG_COMPRESSED = 0x1
SYSFLAG_MULTI_TAGS = 0x2
TRANSACTION_NOT_TYPE = 0x0
TRANSACTION_PREPARED_TYPE = 0x4
TRANSACTION_COMMIT_TYPE = 0x8
TRANSACTION_ROLLBACK_TYPE = 0xC
TRANSACTION_MASK = 0xC


def reset_transaction_value(sysflag: int, value: int) -> int:
    """Return ``sysflag`` with its transaction bits replaced by ``value``."""
    return (sysflag & ~TRANSACTION_MASK) | value


def encode_properties(properties: dict[str, str]) -> str:
    """Encode properties as ``name\\x01value\\x02`` pairs, skipping ``None``
    and empty values (decoding drops them: RocketMQ's decoder does too).

    The last line of defence behind ``validation``: whatever path a property
    took, a separator inside a name or value, or an empty name, raises
    ``IllegalPropertyError`` here, so a record's decoded properties are always
    the ones given (two scans of the encoded text, in C).
    """
    pairs = [(k, v) for k, v in properties.items() if v]
    text = "".join([f"{k}\x01{v}\x02" for k, v in pairs])
    n = len(pairs)
    if (
        text.count("\x01") != n
        or text.count("\x02") != n
        or text.startswith("\x01")
        or "\x02\x01" in text
    ):
        from broker_core.errors import IllegalPropertyError

        bad = next(
            (k for k, v in pairs if not k or "\x01" in k + v or "\x02" in k + v), ""
        )
        raise IllegalPropertyError(
            f"property {bad!r}: names and values may not contain \\x01 or \\x02, "
            "names may not be empty"
        )
    return text


def decode_properties(text: str) -> dict[str, str]:
    """Decode properties as ``MessageDecoder.string2messageProperties`` does.

    A segment is kept only when its first ``\\x01`` leaves a non-empty name and a
    non-empty value (the value may contain further ``\\x01``).
    """
    out: dict[str, str] = {}
    if not text:
        return out
    for part in text.split("\x02"):
        k, sep, v = part.partition("\x01")
        if sep and k and v and k != "__CRC32#":
            out[k] = v
    return out


@dataclass(slots=True)
class Message:
    """A message as a client sends it.

    ``tags`` is one tag string; ``keys`` is a space-separated string or a list of
    keys, each indexed for ``query_by_key``; ``properties`` are user properties.
    ``msg_id`` is the client's own message id (RocketMQ clients make one per
    message and keep it across retries): stored as ``UNIQ_KEY``; None lets the
    broker make one.
    """

    topic: str
    body: bytes
    tags: str | None = None
    keys: str | list[str] | None = None
    properties: dict[str, str] | None = None
    queue_id: int | None = None
    flag: int = 0
    msg_id: str | None = None

    def keys_string(self) -> str | None:
        """Return the keys as RocketMQ stores them: one space-separated string."""
        if self.keys is None:
            return None
        if isinstance(self.keys, str):
            return self.keys
        return " ".join(self.keys)


@dataclass(slots=True)
class MessageInner:
    """A fully specified message for ``MessageStore.put_inner``.

    Unlike ``Message`` nothing is validated against the sendable-topic rules and
    every stored field is chosen by the caller: the transaction and schedule
    services use it to write half, op, commit and delayed messages.

    ``properties`` must hold ``TAGS``/``KEYS``/``UNIQ_KEY`` when the message has
    them (``tags_code`` is computed from ``TAGS`` on dispatch). ``queue_id`` must be
    within the topic's queues. ``sysflag`` carries the transaction bits: records
    whose transaction value is PREPARED or ROLLBACK get queue offset 0 and no
    consume-queue unit; ROLLBACK records are not indexed (as in RocketMQ).
    ``born_timestamp`` of 0 means "now".
    """

    topic: str
    queue_id: int
    body: bytes
    properties: dict[str, str] = field(default_factory=dict)
    flag: int = 0
    sysflag: int = 0
    born_timestamp: int = 0
    born_host: str = "127.0.0.1:0"
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0


class SendStatus(enum.Enum):
    """Outcome of a send (RocketMQ ``SendStatus``)."""

    SEND_OK = "SEND_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"


@dataclass(slots=True)
class SendResult:
    """What a send returns: ids, where the message landed, and the status."""

    msg_id: str
    offset_msg_id: str
    queue_id: int
    queue_offset: int
    status: SendStatus = SendStatus.SEND_OK
    topic: str = ""
    commit_log_offset: int = 0


@dataclass(slots=True)
class PutResult:
    """Outcome of ``MessageStore.put_inner``: the record's place in the log."""

    commit_log_offset: int
    size: int
    queue_offset: int
    store_timestamp: int
    offset_msg_id: str
    status: SendStatus = SendStatus.SEND_OK


class PullStatus(enum.Enum):
    """Outcome of a pull (RocketMQ client ``PullStatus``)."""

    FOUND = "FOUND"
    NO_NEW_MSG = "NO_NEW_MSG"
    NO_MATCHED_MSG = "NO_MATCHED_MSG"
    OFFSET_ILLEGAL = "OFFSET_ILLEGAL"


_SYSFLAG = struct.Struct(">i")


class MessageExt:
    """A message decoded from the commit log, lazily.

    It holds the record's bytes and unpacks the header, body and properties on
    first access, so a pull costs one copy per message until fields are read.
    Fields are read-only: use ``to_inner()`` to build a modified copy.
    """

    __slots__ = ("_raw", "_h", "_props", "_body_at")

    def __init__(self, raw: bytes) -> None:
        self._raw = raw
        self._h: tuple = ()  # type: ignore[type-arg]
        self._props: dict[str, str] | None = None
        self._body_at = 0

    def _hdr(self) -> tuple:  # type: ignore[type-arg]
        h = self._h
        if not h:
            raw = self._raw
            hs = header_layout(_SYSFLAG.unpack_from(raw, SYSFLAG_AT)[0])
            h = self._h = hs.unpack_from(raw, 0)
            self._body_at = hs.size
        return h

    def raw_record(self) -> bytes:
        """The record as stored in the commit log (``MessageExt(raw)`` again)."""
        return bytes(self._raw)

    @property
    def store_size(self) -> int:
        return len(self._raw)

    @property
    def queue_id(self) -> int:
        return int(self._hdr()[3])

    @property
    def flag(self) -> int:
        return int(self._hdr()[4])

    @property
    def queue_offset(self) -> int:
        return int(self._hdr()[5])

    @property
    def commit_log_offset(self) -> int:
        return int(self._hdr()[6])

    @property
    def sysflag(self) -> int:
        return int(self._hdr()[7])

    @property
    def born_timestamp(self) -> int:
        return int(self._hdr()[8])

    @property
    def store_timestamp(self) -> int:
        return int(self._hdr()[11])

    @property
    def reconsume_times(self) -> int:
        return int(self._hdr()[14])

    @property
    def prepared_transaction_offset(self) -> int:
        return int(self._hdr()[15])

    @property
    def body(self) -> bytes:
        raw = self._raw
        if not raw[SYSFLAG_AT + 3] & 0x30:  # IPv4 hosts (sysflag's low byte)
            n = _SYSFLAG.unpack_from(raw, V4_BODY_LEN_AT)[0]
            return raw[HEADER_SIZE : HEADER_SIZE + n]
        h = self._hdr()
        at = self._body_at
        return self._raw[at : at + h[16]]

    def _topic_span(self) -> tuple[int, int]:
        h = self._hdr()
        tpos = self._body_at + h[16]
        if h[1] == MAGIC_V1:  # one-byte topic length
            return tpos + 1, self._raw[tpos]
        return tpos + 2, int.from_bytes(self._raw[tpos : tpos + 2], "big")

    @property
    def topic(self) -> str:
        start, n = self._topic_span()
        return self._raw[start : start + n].decode()

    @property
    def born_host(self) -> str:
        h = self._hdr()
        return format_host(h[9], h[10])

    @property
    def store_host(self) -> str:
        h = self._hdr()
        return format_host(h[12], h[13])

    @property
    def offset_msg_id(self) -> str:
        """Hex of store IP, port and commit-log offset (RocketMQ offsetMsgId)."""
        h = self._hdr()
        return (bytes(h[12]) + struct.pack(">iq", h[13], h[6])).hex().upper()

    @property
    def properties(self) -> dict[str, str]:
        """All properties, user and system (``TAGS``, ``KEYS``, ``UNIQ_KEY`` ...)."""
        if self._props is None:
            start, n = self._topic_span()
            ppos = start + n
            plen = int.from_bytes(self._raw[ppos : ppos + 2], "big")
            self._props = decode_properties(
                self._raw[ppos + 2 : ppos + 2 + plen].decode()
            )
        return self._props

    @property
    def tags(self) -> str | None:
        return self.properties.get(PROPERTY_TAGS)

    @property
    def keys(self) -> str | None:
        return self.properties.get(PROPERTY_KEYS)

    @property
    def msg_id(self) -> str:
        """The UNIQ_KEY, or the offset id for records written without one."""
        return self.properties.get(PROPERTY_UNIQ_KEY) or self.offset_msg_id

    def to_inner(self) -> MessageInner:
        """Return a ``MessageInner`` copy, for services that re-put a message."""
        return MessageInner(
            topic=self.topic,
            queue_id=self.queue_id,
            body=self.body,
            properties=dict(self.properties),
            flag=self.flag,
            sysflag=self.sysflag,
            born_timestamp=self.born_timestamp,
            born_host=self.born_host,
            reconsume_times=self.reconsume_times,
            prepared_transaction_offset=self.prepared_transaction_offset,
        )

    def __repr__(self) -> str:
        return (
            f"MessageExt(topic={self.topic!r}, queue_id={self.queue_id}, "
            f"queue_offset={self.queue_offset}, "
            f"commit_log_offset={self.commit_log_offset}, msg_id={self.msg_id!r})"
        )


@dataclass(slots=True)
class PullResult:
    """What a pull returns: the messages, where to pull next, and the status."""

    messages: list[MessageExt]
    next_offset: int
    status: PullStatus
    min_offset: int = 0
    max_offset: int = 0
