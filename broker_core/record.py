"""The commit-log record format (RocketMQ ``MessageExtEncoder`` layout).

Everything here is a pure function over bytes, so another process (a Spark
job decoding a segment range, the ``inspect`` command) can decode records with
no store open: ``decode_buffer(memoryview(segment_bytes), base_offset)``.
"""

from __future__ import annotations

import functools
import socket
import struct
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from broker_core.message import MessageExt

# Sysflag bits that widen the born / store host fields from 4 to 16 bytes.
SYSFLAG_BORNHOST_V6 = 0x10
SYSFLAG_STOREHOST_V6 = 0x20

MAGIC_V1 = -626843481  # 0xDAA320A7: one-byte topic length
MAGIC_V2 = -626843477  # 0xDAA320AB: two-byte topic length (topics > 127 bytes)
BLANK_MAGIC = -875286124  # 0xCBD43194: end-of-segment filler
# Laid over a damaged range by recovery once its bytes are in quarantine/:
# total i | SKIP_MAGIC i, then the damaged bytes left as they were.
SKIP_MAGIC = -875286123  # 0xCBD43195

# Fixed part of a record with IPv4 born and store hosts, big-endian:
# 0 totalSize i | 4 magic i | 8 bodyCRC i | 12 queueId i | 16 flag i
# 20 queueOffset q | 28 physicalOffset q | 36 sysFlag i | 40 bornTimestamp q
# 48 bornHost 4s + port i | 56 storeTimestamp q | 64 storeHost 4s + port i
# 72 reconsumeTimes i | 76 preparedTransactionOffset q | 84 bodyLength i
# then body, topicLength (b, or h for V2) + topic, propertiesLength h + properties.
HEADER = struct.Struct(">iiiiiqqiq4siq4siiqi")
HEADER_SIZE = HEADER.size  # 88
# The same fields with IPv6 hosts: sysflag bits 0x10 / 0x20 widen each host to 16s,
# keyed by (born host is IPv6, store host is IPv6).
HEADER_V6 = {
    (b, s): struct.Struct(
        ">iiiiiqqiq" + ("16s" if b else "4s") + "iq" + ("16s" if s else "4s") + "iiqi"
    )
    for b in (False, True)
    for s in (False, True)
}
# Blank marker written when a record does not fit the rest of a segment.
BLANK = struct.Struct(">ii")  # remaining bytes i | BLANK_MAGIC i
TOTAL_SIZE = struct.Struct(">i")
PROPS_LEN = struct.Struct(">H")
TOPIC_LEN_V2 = struct.Struct(">h")
# The smallest V1 record: fixed part, 1-byte topic length, 2-byte properties length.
MIN_RECORD_SIZE = HEADER_SIZE + 3
# Queue offset, physical offset and store timestamp are patched into an encoded record.
QUEUE_OFFSET_AT = 20
PHYSICAL_OFFSET_AT = 28
STORE_TIMESTAMP_AT = 56
# Read straight from a record: its sysflag (which says the hosts' layout), and,
# with IPv4 hosts (the fixed layout, ``HEADER``), where its body's length is.
SYSFLAG_AT = 36
V4_BODY_LEN_AT = HEADER_SIZE - 4

# The record CRC property (after RocketMQ's ``enabledAppendPropCRC``): the last
# 20 bytes of the properties are "__CRC32#", 0x01, ten digits least significant
# first, 0x02. Unlike RocketMQ's, the CRC runs over the bytes between the body
# and this property (topic and properties) and then over the fixed header; the
# header holds the body CRC, so the body is covered without being hashed twice,
# and the part that does not depend on the record's offsets can be computed
# before the append lock is taken. Every record this store writes carries it,
# so recovery detects damage anywhere in a record, not just in the body.
PROP_CRC_KEY = "__CRC32#"
PROP_CRC_PREFIX = b"__CRC32#\x01"
PROP_CRC_SIZE = 20

_host_cache: dict[str, tuple[bytes, int]] = {}


def parse_host(host: str) -> tuple[bytes, int]:
    """Return the packed IPv4 address and the port of ``"ip:port"``."""
    cached = _host_cache.get(host)
    if cached is None:
        ip, _, port = host.rpartition(":")
        try:
            packed = socket.inet_aton(ip or "127.0.0.1")
        except OSError:
            packed = b"\x7f\x00\x00\x01"
        cached = (packed, int(port or 0))
        if len(_host_cache) < 4096:
            _host_cache[host] = cached
    return cached


def format_host(packed: bytes, port: int) -> str:
    """Return ``"ip:port"`` for a packed IPv4 or IPv6 address."""
    if len(packed) == 4:
        return f"{socket.inet_ntoa(packed)}:{port}"
    return f"[{socket.inet_ntop(socket.AF_INET6, packed)}]:{port}"


def encode_record(
    *,
    topic: bytes,
    queue_id: int,
    flag: int,
    queue_offset: int,
    physical_offset: int,
    sysflag: int,
    born_timestamp: int,
    born_host: bytes,
    born_port: int,
    store_timestamp: int,
    store_host: bytes,
    store_port: int,
    reconsume_times: int,
    prepared_transaction_offset: int,
    body: bytes,
    properties: bytes,
) -> bytes:
    """Return one encoded record (IPv4 hosts; V2 magic for topics over 127 bytes)."""
    if len(topic) > 127:
        magic, tlen = MAGIC_V2, TOPIC_LEN_V2.pack(len(topic))
    else:
        magic, tlen = MAGIC_V1, bytes((len(topic),))
    total = HEADER_SIZE + len(body) + len(tlen) + len(topic) + 2 + len(properties)
    head = HEADER.pack(
        total,
        magic,
        zlib.crc32(body) & 0x7FFFFFFF,
        queue_id,
        flag,
        queue_offset,
        physical_offset,
        sysflag & ~(SYSFLAG_BORNHOST_V6 | SYSFLAG_STOREHOST_V6),
        born_timestamp,
        born_host,
        born_port,
        store_timestamp,
        store_host,
        store_port,
        reconsume_times,
        prepared_transaction_offset,
        len(body),
    )
    return b"".join(
        (head, body, tlen, topic, PROPS_LEN.pack(len(properties)), properties)
    )


def offset_msg_id(store_host: bytes, store_port: int, physical_offset: int) -> str:
    """Return the offset message id: hex of store IP, port, log offset."""
    if physical_offset < 0:
        return (
            (store_host + struct.pack(">iq", store_port, physical_offset)).hex().upper()
        )
    return f"{_id_prefix(store_host, store_port)}{physical_offset:016X}"


@functools.lru_cache(maxsize=64)
def _id_prefix(store_host: bytes, store_port: int) -> str:
    return (store_host + struct.pack(">i", store_port)).hex().upper()


def decode_offset_msg_id(msg_id: str) -> tuple[str, int] | None:
    """Return ``("ip:port", physical_offset)`` of an offset id, or None if malformed."""
    if len(msg_id) not in (32, 56):
        return None
    try:
        raw = bytes.fromhex(msg_id)
    except ValueError:
        return None
    iplen = 4 if len(raw) == 16 else 16
    port, offset = struct.unpack_from(">iq", raw, iplen)
    return format_host(raw[:iplen], port), offset


class RecordCheck(Enum):
    """What ``check_record`` found at a position."""

    OK = "ok"
    BLANK = "blank"  # end-of-segment filler: continue in the next segment
    END = "end"  # zeros: the end of written data
    CORRUPT = "corrupt"  # torn or damaged
    SKIP = "skip"  # a quarantined range: continue after it


@dataclass(slots=True)
class CheckedRecord:
    status: RecordCheck
    size: int


def check_record(
    buf: memoryview | bytes,
    pos: int,
    end: int,
    verify_crc: bool = True,
    require_prop_crc: bool = False,
) -> CheckedRecord:
    """Validate the record at ``buf[pos:]`` (recovery's ``checkMessageAndReturnSize``).

    ``end`` bounds the readable bytes. A record is OK only if its size fields
    agree with the declared total and, with ``verify_crc``, its body CRC and its
    ``__CRC32#`` record CRC (if present; required with ``require_prop_crc``) match.
    """
    remaining = end - pos
    if remaining < 8:
        return CheckedRecord(RecordCheck.END, 0)
    total, magic = BLANK.unpack_from(buf, pos)
    if total == 0 and magic == 0:
        return CheckedRecord(RecordCheck.END, 0)
    if magic == BLANK_MAGIC:
        if total == remaining or 8 <= total <= remaining:
            return CheckedRecord(RecordCheck.BLANK, total)
        return CheckedRecord(RecordCheck.CORRUPT, 0)
    if magic == SKIP_MAGIC:
        if 8 <= total <= remaining:
            return CheckedRecord(RecordCheck.SKIP, total)
        return CheckedRecord(RecordCheck.CORRUPT, 0)
    if (
        magic not in (MAGIC_V1, MAGIC_V2)
        or total < MIN_RECORD_SIZE
        or total > remaining
    ):
        return CheckedRecord(RecordCheck.CORRUPT, 0)
    sysflag = struct.unpack_from(">i", buf, pos + 36)[0]
    extra = (12 if sysflag & SYSFLAG_BORNHOST_V6 else 0) + (
        12 if sysflag & SYSFLAG_STOREHOST_V6 else 0
    )
    bpos = pos + HEADER_SIZE + extra
    body_len = struct.unpack_from(">i", buf, bpos - 4)[0]
    if body_len < 0 or bpos + body_len + 3 > pos + total:
        return CheckedRecord(RecordCheck.CORRUPT, 0)
    tpos = bpos + body_len
    if magic == MAGIC_V1:
        topic_len, tl_size = buf[tpos], 1
    else:
        topic_len, tl_size = TOPIC_LEN_V2.unpack_from(buf, tpos)[0], 2
    ppos = tpos + tl_size + topic_len
    if ppos + 2 > pos + total:
        return CheckedRecord(RecordCheck.CORRUPT, 0)
    props_len = PROPS_LEN.unpack_from(buf, ppos)[0]
    if ppos + 2 + props_len != pos + total:
        return CheckedRecord(RecordCheck.CORRUPT, 0)
    if verify_crc:
        crc = struct.unpack_from(">i", buf, pos + 8)[0]
        if zlib.crc32(buf[bpos : bpos + body_len]) & 0x7FFFFFFF != crc:
            return CheckedRecord(RecordCheck.CORRUPT, 0)
        rec_end = pos + total
        has_prop_crc = (
            props_len >= PROP_CRC_SIZE
            and bytes(buf[rec_end - PROP_CRC_SIZE : rec_end - 11]) == PROP_CRC_PREFIX
        )
        if require_prop_crc and not has_prop_crc:
            return CheckedRecord(RecordCheck.CORRUPT, 0)
        if has_prop_crc:
            digits = bytes(buf[rec_end - 11 : rec_end - 1])
            want = zlib.crc32(
                buf[pos:bpos],
                zlib.crc32(buf[bpos + body_len : rec_end - PROP_CRC_SIZE]),
            )
            if (
                buf[rec_end - 1] != 2
                or not digits.isdigit()
                or int(digits[::-1]) != want & 0x7FFFFFFF
            ):
                return CheckedRecord(RecordCheck.CORRUPT, 0)
    return CheckedRecord(RecordCheck.OK, total)


_ZEROS = bytes(1 << 16)


def blank_fills_segment(
    buf: memoryview | bytes,
    pos: int,
    size: int,
    data_end: Callable[[int], int] | None = None,
) -> bool:
    """Whether the end-of-segment blank at ``buf[pos]`` is one the appender
    (or recovery) laid: it reaches the segment's end ``size`` and nothing but
    zeros follows its 8 bytes. Every reader ends a segment at a blank, so a
    marker written over records (forged, or damage that reads as one) would
    hide every record after it: such a marker is damage. ``data_end(p)``:
    where mapped reads from ``p`` must stop (``Segment.data_end``; past it
    are holes, which read as zeros)."""
    if pos + 8 > size:
        return False
    total, magic = BLANK.unpack_from(buf, pos)
    if magic != BLANK_MAGIC or pos + total != size:
        return False
    p = pos + 8
    stop = size if data_end is None else min(size, data_end(p))
    while p < stop:
        n = min(stop - p, len(_ZEROS))
        if buf[p : p + n] != _ZEROS[:n]:
            return False
        p += n
    return True


_HEAD3 = struct.Struct(">iii")
# totalSize, magic, bodyCRC, queueId, flag, queueOffset, physicalOffset, sysFlag
_HEAD8 = struct.Struct(">iiiiiqqi")
_SYSFLAG = struct.Struct(">i")
_V6_HOSTS = SYSFLAG_BORNHOST_V6 | SYSFLAG_STOREHOST_V6
_PHYS = struct.Struct(">q")
_MAGICS = (MAGIC_V1, MAGIC_V2)


def physical_offset(buf: memoryview | bytes, pos: int) -> int:
    """The log offset a record at ``buf[pos]`` says it was written at (its
    header's physical offset field)."""
    return _PHYS.unpack_from(buf, pos + PHYSICAL_OFFSET_AT)[0]


def starts_record(buf: memoryview | bytes, pos: int, size: int, offset: int) -> bool:
    """Whether a record of ``size`` bytes that names log ``offset`` starts at
    ``buf[pos]``: the cheap check of a queue unit against the log, for records
    whose bytes are trusted (a damaged unit must not make a phantom message
    out of the middle of another record). ``intact`` also checks the CRCs."""
    if pos < 0 or pos + size > len(buf) or size < MIN_RECORD_SIZE:
        return False
    total, magic, _c, _q, _f, _qo, phys, _s = _HEAD8.unpack_from(buf, pos)
    return total == size and phys == offset and magic in _MAGICS


def names_queue_record(
    buf: memoryview | bytes,
    pos: int,
    size: int,
    offset: int,
    queue_id: int,
    queue_offset: int,
) -> bool:
    """``starts_record``, and the record is the one at ``queue_offset`` of
    queue ``queue_id`` (as written in its header): a unit damaged into the
    position of another whole record is caught too (it served that record
    twice, and its own never)."""
    if pos < 0 or pos + size > len(buf) or size < MIN_RECORD_SIZE:
        return False
    total, magic, _c, qid, _f, qoff, phys, _s = _HEAD8.unpack_from(buf, pos)
    return (
        total == size
        and phys == offset
        and magic in _MAGICS
        and qid == queue_id
        and qoff == queue_offset
    )


def intact(buf: memoryview | bytes, pos: int, size: int, offset: int) -> bool:
    """Whether the record a queue unit points at is whole: the read-path check.

    ``size`` and ``offset`` come from the unit. True only if the record there
    declares that size and offset, and its body CRC and its ``__CRC32#`` record
    CRC (which must be present) match: every byte is covered, so a damaged or
    quarantined record is never served. IPv6 hosts take the general check.
    """
    end = pos + size
    if pos < 0 or end > len(buf) or size < MIN_RECORD_SIZE + PROP_CRC_SIZE:
        return False
    total, magic, bcrc, _q, _f, _qo, phys, sysflag = _HEAD8.unpack_from(buf, pos)
    if total != size or phys != offset or magic not in _MAGICS:
        return False
    if sysflag & _V6_HOSTS:
        return check_record(buf, pos, end, True, True).status is RecordCheck.OK
    bpos = pos + HEADER_SIZE
    bend = bpos + _SYSFLAG.unpack_from(buf, bpos - 4)[0]
    t = end - PROP_CRC_SIZE
    crc32 = zlib.crc32
    if not bpos <= bend <= t or crc32(buf[bpos:bend]) & 0x7FFFFFFF != bcrc:
        return False
    want = crc32(buf[pos:bpos], crc32(buf[bend:t])) & 0x7FFFFFFF
    return bytes(buf[t:end]) == b"%s%s\x02" % (PROP_CRC_PREFIX, (b"%010d" % want)[::-1])


def find_record(
    buf: memoryview | bytes,
    mm: object,
    start: int,
    limit: int,
    base: int,
    verify_crc: bool = True,
    search_end: int | None = None,
) -> int:
    """Return the first position in ``[start, limit)`` where a valid record starts.

    ``mm`` is the segment's ``mmap`` (its ``find`` runs in C); a candidate must
    carry a record magic, its own log offset (``base`` + position) and, with
    ``verify_crc``, matching CRCs, and end by ``limit``. With ``search_end`` only
    records starting before it are looked for. Returns -1 if there is none: the
    resynchronising step after a damaged record.
    """
    find = mm.find  # type: ignore[attr-defined]
    # The magic is a record's bytes 4..8: one starting at search_end - 1 has
    # it end at search_end + 7 (the bound was + 4: records starting in the
    # last 3 bytes before search_end were never found).
    stop = limit if search_end is None else min(limit, search_end + 7)
    best = -1
    for magic in _MAGICS:
        needle = struct.pack(">i", magic)
        at = start + 4
        while True:
            hit = find(needle, at, stop)
            if hit < 0 or (best >= 0 and hit - 4 >= best):
                break
            p = hit - 4
            if (
                p + MIN_RECORD_SIZE <= limit
                and _PHYS.unpack_from(buf, p + PHYSICAL_OFFSET_AT)[0] == base + p
                and check_record(buf, p, limit, verify_crc, verify_crc).status
                is RecordCheck.OK
            ):
                best = p
                break
            at = hit + 1
    return best


def prop_crc(crc: int) -> bytes:
    """Return the 20-byte ``__CRC32#`` property for a record CRC (see above)."""
    return b"%s%s\x02" % (PROP_CRC_PREFIX, f"{crc:010d}"[::-1].encode())


def header_layout(sysflag: int) -> struct.Struct:
    """Return the fixed-part layout for a record's ``sysflag`` (its host widths)."""
    if not sysflag & (SYSFLAG_BORNHOST_V6 | SYSFLAG_STOREHOST_V6):
        return HEADER
    return HEADER_V6[
        (bool(sysflag & SYSFLAG_BORNHOST_V6), bool(sysflag & SYSFLAG_STOREHOST_V6))
    ]


def topic_and_properties(
    view: memoryview, pos: int, magic: int, sysflag: int, body_len: int
) -> tuple[str, int, int]:
    """Return the topic of the record at ``view[pos:]`` and where its property
    text starts and how long it is, from the header fields the caller unpacked
    with ``HEADER`` (``magic``, ``sysflag`` and the v4 body length; a record
    with an IPv6 host has 12 more header bytes per such host, and its body
    length after them)."""
    extra = (12 if sysflag & SYSFLAG_BORNHOST_V6 else 0) + (
        12 if sysflag & SYSFLAG_STOREHOST_V6 else 0
    )
    if extra:
        body_len = TOTAL_SIZE.unpack_from(view, pos + HEADER.size + extra - 4)[0]
    tpos = pos + HEADER.size + extra + body_len
    if magic == MAGIC_V1:
        tl = view[tpos]
        tpos += 1
    else:
        tl = TOPIC_LEN_V2.unpack_from(view, tpos)[0]
        tpos += 2
    topic = str(view[tpos : tpos + tl], "utf-8")
    ppos = tpos + tl
    return topic, ppos + 2, PROPS_LEN.unpack_from(view, ppos)[0]


def decode_record(
    buf: memoryview | bytes, pos: int, size: int | None = None
) -> MessageExt:
    """Return the (already validated) record at ``buf[pos:]`` as a ``MessageExt``.

    ``size`` is the record's total size when the caller knows it (a consume-queue
    unit); fields are decoded lazily from a copy of the record's bytes.
    """
    from broker_core.message import MessageExt

    if size is None:
        size = TOTAL_SIZE.unpack_from(buf, pos)[0]
    return MessageExt(bytes(buf[pos : pos + size]))


def decode_buffer(
    buf: memoryview | bytes,
    base_offset: int = 0,
    start: int = 0,
    end: int | None = None,
    verify_crc: bool = False,
) -> Iterator[MessageExt]:
    """Yield every record in ``buf[start:end]``, a slice of one segment.

    ``base_offset`` is the commit-log offset of ``buf[0]`` (a segment's file name);
    ``start`` must be a record boundary. Iteration stops at the end-of-segment
    blank, at zeros, at a record cut by ``end`` or at a damaged record (with
    ``verify_crc``, also at a CRC mismatch). Usable from any process: it needs only
    the bytes.
    """
    limit = len(buf) if end is None else end
    pos = start
    while pos < limit:
        chk = check_record(buf, pos, limit, verify_crc)
        if chk.status is not RecordCheck.OK:
            return
        msg = decode_record(buf, pos)
        if msg.commit_log_offset != base_offset + pos:
            return
        yield msg
        pos += chk.size
