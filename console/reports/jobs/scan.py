"""Decode commit-log byte ranges into Arrow record batches, for the report jobs.

This module imports only ``broker_core`` and ``pyarrow`` (never Django or
PySpark): Spark ships it to the executors by value, and the benchmark's
single-process and multiprocessing scans use it too, so all three decode the
same way.

A segment is split into byte ranges of about ``range_bytes``. A record belongs
to the range its first byte lies in; a range's decoder finds its first record
by searching for a record magic whose physical-offset field names that very
position (every record stores its own log offset, so a match is a record
boundary), then hops record to record and finishes the last record even when
it runs past the range's end. The layout is RocketMQ's (``broker_core.record``).
"""

from __future__ import annotations

import contextlib
import mmap
import os
import struct
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

import pyarrow as pa

from broker_core import record, shared
from broker_core.message import (
    NAME_VALUE_SEPARATOR,
    PROPERTY_KEYS,
    PROPERTY_SEPARATOR,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
)
from broker_core.record import SYSFLAG_BORNHOST_V6, SYSFLAG_STOREHOST_V6

#: Default split size: small enough to balance two cores over one segment.
RANGE_BYTES = 32 << 20
#: Rows per Arrow batch handed to Spark.
BATCH_ROWS = 1 << 16

# Big-endian magics as they appear in the file, used to find a record boundary.
_MAGICS = (
    struct.pack(">i", record.MAGIC_V1),
    struct.pack(">i", record.MAGIC_V2),
)
# Formats, not ``struct.Struct`` objects: this module is pickled by value for
# Spark's executors, and a Struct does not pickle (struct caches the formats).
_STATE_Q = "@q"  # broker_core.shared: native longs in ``state``
_STATE_Q_SIZE = 8
_CRC_KEY = record.PROP_CRC_KEY
_V6 = SYSFLAG_BORNHOST_V6 | SYSFLAG_STOREHOST_V6

#: Properties of user messages dropped from the ``properties`` column (they are
#: columns of their own, or per-message ids no report reads): keeps ten million
#: rows small. System topics keep ``UNIQ_KEY`` (half message ids).
_DROP_USER = frozenset((_CRC_KEY, PROPERTY_TAGS, PROPERTY_KEYS, PROPERTY_UNIQ_KEY))
_DROP_SYSTEM = frozenset((_CRC_KEY, PROPERTY_TAGS, PROPERTY_KEYS))
_SYSTEM_PREFIXES = ("RMQ_SYS_", "rmq_sys_", "SCHEDULE_TOPIC_XXXX", "TRANS_CHECK_")

#: One row per record; the input schema of every report transform.
ARROW_SCHEMA = pa.schema(
    [
        pa.field("topic", pa.string(), False),
        pa.field("queue_id", pa.int32(), False),
        pa.field("queue_offset", pa.int64(), False),
        pa.field("physical_offset", pa.int64(), False),
        pa.field("sysflag", pa.int32(), False),
        pa.field("born_ts", pa.int64(), False),
        pa.field("store_ts", pa.int64(), False),
        pa.field("body_size", pa.int32(), False),
        pa.field("prepared_offset", pa.int64(), False),
        pa.field("tags", pa.string(), True),
        pa.field("keys", pa.string(), True),
        pa.field("properties", pa.map_(pa.string(), pa.string()), False),
    ]
)
COLUMNS = tuple(ARROW_SCHEMA.names)


class LogRange(NamedTuple):
    """A byte range ``[start, end)`` of one segment file (base = its log offset)."""

    path: str
    base: int
    start: int
    end: int


def segment_files(store_dir: str | Path) -> list[Path]:
    """Return the store's commit-log segment files in offset order."""
    return sorted((Path(store_dir) / "commitlog").glob("[0-9]" * 20))


def commit_position(store_dir: str | Path) -> int | None:
    """Return the end of the last complete record (``state``), None if unknown."""
    path = Path(store_dir) / "state"
    try:
        with open(path, "rb") as fh:
            raw = fh.read(shared.COMMIT_AT + _STATE_Q_SIZE)
    except OSError:
        return None
    if len(raw) < shared.COMMIT_AT + _STATE_Q_SIZE:
        return None
    if struct.unpack_from(_STATE_Q, raw, 0)[0] != shared.STATE_MAGIC:
        return None
    return struct.unpack_from(_STATE_Q, raw, shared.COMMIT_AT)[0]


def lost_ranges(store_dir: str | Path) -> list[tuple[int, int]]:
    """``(offset, length)`` of the log ranges the store lists as gone in
    ``quarantine/`` (a deleted or cut segment, flushed records cut from a
    damaged tail): their records are missing and nothing in the log marks
    them (a quarantined range the log still holds is a filler the decoder
    steps over and counts). A torn tail past the flushed position was never
    acknowledged: not counted."""
    from broker_core.quarantine import Quarantine

    out = []
    for r in Quarantine(Path(store_dir)).ranges:
        if r.action == "lost" or (
            r.action == "cut" and not r.reason.startswith("torn tail")
        ):
            out.append((int(r.offset), int(r.length)))
    return out


def position_problem(store_dir: str | Path, end: int | None) -> str | None:
    """Why ``end`` (the ``state`` file's commit position) cannot be where the
    log ends: below the position the checkpoint says was flushed (a damaged
    ``state``: a report read 784 of 2,000 messages and said nothing)."""
    from broker_core.checkpoint import read_checkpoint

    if end is None:
        return None
    flushed = read_checkpoint(Path(store_dir) / "checkpoint").flushed_offset
    if end < flushed:
        return (
            f"the store's state file says the log ends at {end:,} but its "
            f"checkpoint says it was flushed to {flushed:,}: the state file is "
            "damaged"
        )
    return None


def is_boundary(store_dir: str | Path, offset: int, segment_size: int) -> bool:
    """Whether a record of the log starts at ``offset`` (or a segment does):
    an export resumes only there."""
    if offset <= 0 or offset % segment_size == 0:
        return True
    base = offset - offset % segment_size
    path = Path(store_dir) / "commitlog" / f"{base:020d}"
    try:
        with open(path, "rb") as fh:
            fh.seek(offset - base)
            head = fh.read(record.PHYSICAL_OFFSET_AT + 8)
    except OSError:
        return False
    if len(head) >= 8 and head[4:8] == struct.pack(">i", record.BLANK_MAGIC):
        return True  # the end-of-segment filler: the next segment follows
    if len(head) < record.PHYSICAL_OFFSET_AT + 8 or head[4:8] not in _MAGICS:
        return False
    return record.physical_offset(head, 0) == offset


def split_ranges(
    store_dir: str | Path,
    range_bytes: int = RANGE_BYTES,
    start_offset: int = 0,
    end_offset: int | None = None,
) -> list[LogRange]:
    """Return record-aligned-by-decoder byte ranges covering the log.

    ``end_offset`` defaults to the store's commit position, so bytes a live or
    killed appender wrote past it are never read. ``start_offset`` lets an
    incremental export skip what it already holds.
    """
    if end_offset is None:
        end_offset = commit_position(store_dir)
    out: list[LogRange] = []
    for path in segment_files(store_dir):
        base = int(path.name)
        size = path.stat().st_size
        lo = max(0, start_offset - base)
        hi = size if end_offset is None else min(size, end_offset - base)
        pos = lo
        while pos < hi:
            out.append(LogRange(str(path), base, pos, min(pos + range_bytes, hi)))
            pos += range_bytes
    return out


def find_boundary(buf: Any, base: int, start: int, end: int) -> int | None:
    """Return the first record boundary in ``buf[start:end]``, None if none.

    Position 0 of a segment is always a boundary; elsewhere a boundary is a
    magic at ``p + 4`` whose physical-offset field
    (``p + record.PHYSICAL_OFFSET_AT``) equals
    ``base + p``. A body would have to embed a record header naming its own
    offset to fool this; the hop that follows would then still stop at the
    first inconsistent record.
    """
    if start == 0:
        return 0
    best: int | None = None
    for magic in _MAGICS:
        at = start + 4
        # A magic at ``at`` names a record at ``at - 4``: search up to records
        # starting at ``end - 1``, or before a boundary the other magic found.
        stop = (end if best is None else best) + 7
        while True:
            at = buf.find(magic, at, stop)
            if at < 0:
                break
            p = at - 4
            if (
                p + record.PHYSICAL_OFFSET_AT + 8 <= len(buf)
                and record.physical_offset(buf, p) == base + p
            ):
                best = p
                break
            at += 1
    return best


@contextlib.contextmanager
def open_range(
    rng: LogRange | tuple[str, int, int, int],
) -> Iterator[tuple[Any, int, int, int, int] | None]:
    """Map the segment of ``rng`` and find its first record: yield ``(buf, base,
    first record position, end, segment size)``, or None when the range holds
    no record."""
    path, base, start, end = rng
    with open(path, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        if size == 0 or start >= size:
            yield None
            return
        with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            pos = find_boundary(buf, base, start, min(end, size))
            yield None if pos is None else (buf, base, pos, min(end, size), size)


def decode_range(
    rng: LogRange | tuple[str, int, int, int], batch_rows: int = BATCH_ROWS
) -> Iterator[pa.RecordBatch]:
    """Yield Arrow batches (``ARROW_SCHEMA``) of the records starting in ``rng``."""
    with open_range(rng) as found:
        if found is not None:
            yield from _decode(*found, batch_rows)


def iter_records(
    buf: Any, base: int, pos: int, end: int, size: int
) -> Iterator[tuple[Any, ...]]:
    """Yield one ``COLUMNS`` tuple per record starting in ``buf[pos:end]``.

    ``pos`` must be a record boundary; the last record may run past ``end``
    (up to ``size``). Steps over a damaged record (sizes, offset or CRCs
    wrong: ``record.intact``) to the next whole one; stops at a blank marker
    or zeros.
    """
    unpack = record.HEADER.unpack_from
    magic_v1, magic_v2 = record.MAGIC_V1, record.MAGIC_V2
    topic_props = record.topic_and_properties
    min_size = record.MIN_RECORD_SIZE
    two_ints = record.BLANK.unpack_from
    phys_at = record.physical_offset
    intact = record.intact
    systems: dict[str, bool] = {}  # topic: a system topic's
    while pos < end and pos + 8 <= size:
        total, magic = two_ints(buf, pos)
        if (
            magic not in (magic_v1, magic_v2)
            or total < min_size
            or pos + total > size
            or phys_at(buf, pos) != base + pos
            or not intact(buf, pos, total, base + pos)
        ):
            # A quarantined range, damage, or the end of the data.
            nxt = next_record(buf, base, pos, end, size)
            if nxt is None:
                return
            pos = nxt
            continue
        fields = unpack(buf, pos)
        sysflag = fields[7]
        if sysflag & _V6:
            fields = record.header_layout(sysflag).unpack_from(buf, pos)
        phys, body_len = fields[6], fields[16]
        topic, ppos, plen = topic_props(buf, pos, magic, sysflag, body_len)
        system = systems.get(topic)
        if system is None:
            system = systems[topic] = topic.startswith(_SYSTEM_PREFIXES)
        if plen:
            text = buf[ppos : ppos + plen].decode("utf-8", "replace")
            tags, keys, props = parse_properties(text, system)
        else:
            tags = keys = None
            props = []
        yield (
            topic,
            fields[3],  # queue id
            fields[5],  # queue offset
            phys,
            sysflag,
            fields[8],  # born timestamp
            fields[11],  # store timestamp
            body_len,
            fields[15],  # prepared transaction offset
            tags,
            keys,
            props,
        )
        pos += total


def next_record(
    buf: Any, base: int, pos: int, end: int, size: int, exact_end: bool = False
) -> int | None:
    """Return where records go on after the non-record at ``pos``; None if no
    record starts there before ``end``.

    A quarantined range (``record.SKIP_MAGIC``, laid by recovery) is stepped over
    whole; damage not yet quarantined is stepped over to the next valid record
    (``record.find_record``, CRCs checked). Zeros and a blank marker end the
    data (a blank with anything but zeros after it is damage:
    ``record.blank_fills_segment``), unless ``exact_end`` says records reach
    ``end`` (then zeros are damage too, and searched through).
    """
    if pos + 8 > size:
        return None
    total, magic = record.BLANK.unpack_from(buf, pos)
    if magic == record.BLANK_MAGIC and record.blank_fills_segment(buf, pos, size):
        return None
    if total == 0 and magic == 0 and not exact_end:
        return None
    if magic == record.SKIP_MAGIC and 8 <= total and pos + total <= size:
        return pos + total if pos + total < end else None
    found = record.find_record(buf, buf, pos + 1, size, base, True, end)
    return found if 0 <= found < end else None


def lost_at_end(
    buf: Any, pos: int, end: int, size: int, exact_end: bool
) -> tuple[int, int]:
    """Return (bytes lost, where the data reaches) where the records of a
    range stop at ``pos`` before ``end`` and none follows. Nothing is lost when
    the range's end is not known to hold records, or when a blank marker fills
    the segment's rest (the appender's own end of a segment: it reaches the
    segment's end)."""
    if record.blank_fills_segment(buf, pos, size):
        return 0, size
    if not exact_end or pos >= end:
        return 0, pos
    return end - pos, end


#: Bytes before an exported end whose CRC tells the same log grown from
#: another log (or the same one rewritten) at the same path.
FINGERPRINT_BYTES = 64


def log_fingerprint(store_dir: str | Path, end: int, segment_size: int) -> int | None:
    """Return the CRC32 of the log's bytes just before offset ``end`` (up to
    ``FINGERPRINT_BYTES``, within one segment); None if they cannot be read."""
    import zlib

    if end <= 0:
        return 0
    base = (end - 1) // segment_size * segment_size
    lo = max(base, end - FINGERPRINT_BYTES)
    try:
        with open(Path(store_dir) / "commitlog" / f"{base:020d}", "rb") as fh:
            fh.seek(lo - base)
            data = fh.read(end - lo)
    except OSError:
        return None
    return zlib.crc32(data) if len(data) == end - lo else None


def segment_gaps(
    store_dir: str | Path, end_offset: int, segment_size: int
) -> list[str]:
    """Return what is missing from the log's segments up to ``end_offset``: a
    segment absent between others or at the end, or one shorter than the
    store's segment size. Empty when the files hold the whole log."""
    problems: list[str] = []
    files = segment_files(store_dir)
    if not files:
        return [f"no commit-log segment, but the log reaches offset {end_offset:,}"]
    bases = [int(f.name) for f in files]
    for prev, nxt in zip(bases, bases[1:], strict=False):
        if nxt != prev + segment_size:
            problems.append(
                f"segments {prev:020d} and {nxt:020d} are not contiguous: "
                f"{nxt - prev - segment_size:,} bytes of log are missing"
            )
    for path, base in zip(files, bases, strict=True):
        size = path.stat().st_size
        if size < segment_size and base + size < end_offset:
            problems.append(
                f"segment {path.name} holds {size:,} of {segment_size:,} bytes"
            )
    last = bases[-1] + segment_size
    if last < end_offset:
        problems.append(
            f"the segments end at offset {last:,} but the log reaches "
            f"{end_offset:,}: {end_offset - last:,} bytes are missing"
        )
    return problems


def parse_properties(
    text: str, system: bool
) -> tuple[str | None, str | None, list[tuple[str, str]]]:
    """Return the tags, keys and kept properties of a record's property text.

    A part without
    a separator, a name or a value is skipped; the last TAGS and KEYS win.
    """
    tags = keys = None
    props: list[tuple[str, str]] = []
    drop = _DROP_SYSTEM if system else _DROP_USER
    for part in text.split(PROPERTY_SEPARATOR):
        k, sep, v = part.partition(NAME_VALUE_SEPARATOR)
        if not (sep and k and v):
            continue
        if k == PROPERTY_TAGS:
            tags = v
        elif k == PROPERTY_KEYS:
            keys = v
        if k not in drop:
            props.append((k, v))
    return tags, keys, props


def iter_range(rng: LogRange | tuple[str, int, int, int]) -> Iterator[tuple[Any, ...]]:
    """Yield the ``COLUMNS`` tuples of the records starting in ``rng``."""
    with open_range(rng) as found:
        if found is not None:
            yield from iter_records(*found)


def _decode(
    buf: Any, base: int, pos: int, end: int, size: int, batch_rows: int
) -> Iterator[pa.RecordBatch]:
    rows: list[tuple[Any, ...]] = []
    for row in iter_records(buf, base, pos, end, size):
        rows.append(row)
        if len(rows) >= batch_rows:
            yield record_batch(rows)
            rows.clear()
    if rows:
        yield record_batch(rows)


def record_batch(rows: list[tuple[Any, ...]]) -> pa.RecordBatch:
    arrays = [
        pa.array(list(col), type=field.type)
        for col, field in zip(zip(*rows, strict=True), ARROW_SCHEMA, strict=True)
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=ARROW_SCHEMA)


def decode_ranges(ranges: Iterable[LogRange | tuple[str, int, int, int]]) -> pa.Table:
    """Return every record of ``ranges`` as one Arrow table (tests, small stores)."""
    batches = [b for rng in ranges for b in decode_range(rng)]
    return pa.Table.from_batches(batches, schema=ARROW_SCHEMA)
