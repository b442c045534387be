"""Decode commit-log ranges straight into Arrow columns: the export's decoder.

``scan.iter_records`` builds a Python tuple per record and parses every
property text in Python. Here the Python loop only hops from record to record
and notes where each record's parts lie in the mapped segment; pyarrow does the
rest in C: it gathers the fixed headers, topics and property texts, reads the
header fields as big-endian integers and finds tags and keys with regular
expressions. A record whose properties may hold more than its tags, keys, id
and CRC (system topics, delivered delayed copies, user properties, anything
unusual) is parsed by ``scan.parse_properties``, the row decoder's rules, and a
batch with a record this layout does not cover (IPv6 hosts, inconsistent
lengths, text that is not UTF-8) is decoded by the row decoder outright. Both
decoders give the same rows (tests/console/reports/test_columnar.py).

Like ``scan``, this module imports only ``broker_core`` and ``pyarrow`` and is
shipped to Spark's executors by value.
"""

from __future__ import annotations

import array
import gc
import struct
import sys
from collections.abc import Iterator
from typing import Any, NamedTuple

import pyarrow as pa
import pyarrow.compute as pc

from broker_core import record
from console.reports.jobs import scan

# What the hop reads of a record: totalSize i, magic i, physicalOffset q (at
# 28). A format, not a Struct: the module is pickled by value (see ``scan``).
_HOP = ">ii20xq"
# Header fields gathered per column: (column, offset, width). Layout in
# ``broker_core.record.HEADER`` (IPv4 hosts).
_FIELDS = (
    ("queue_id", 12, 4),
    ("queue_offset", 20, 8),
    ("physical_offset", 28, 8),
    ("sysflag", 36, 4),
    ("born_ts", 40, 8),
    ("store_ts", 56, 8),
    ("prepared_offset", 76, 8),
    ("body_size", 84, 4),
)
_ARRAY_CODES = {1: "B", 2: "H", 4: "i", 8: "q"}
# A property named at the start of the text or after a separator, with a value.
_TAGS_RE = "(?:^|\x02)TAGS\x01(?P<v>[^\x02]+)"
_KEYS_RE = "(?:^|\x02)KEYS\x01(?P<v>[^\x02]+)"
_UNIQ_RE = "(?:^|\x02)UNIQ_KEY\x01[^\x02]"
_CRC_RE = "(?:^|\x02)__CRC32#\x01[^\x02]"
_SWAP = sys.byteorder == "little"
_take_indices: dict[tuple[str, int], pa.Array] = {}


def decode_range(
    rng: scan.LogRange | tuple[str, int, int, int],
    batch_rows: int = scan.BATCH_ROWS,
    skipped: list[int] | None = None,
    exact_end: bool = False,
    span: list[int] | None = None,
) -> Iterator[pa.RecordBatch]:
    """Yield Arrow batches (``scan.ARROW_SCHEMA``) of the records starting in
    ``rng``: the rows ``scan.decode_range`` yields, decoded column-wise.

    Each damaged or quarantined stretch stepped over appends its length in
    bytes to ``skipped``: records were lost there. With ``exact_end`` the
    range ends where the log's records are known to reach (the commit
    position, or a segment that is followed by another): zeros or a blank
    marker before it are damage too. ``span`` receives the range's first
    record position and where its records reach (``RangeWritten``)."""
    if span is None:
        span = []
    span[:] = [rng[3], rng[3]]
    with scan.open_range(rng) as found:
        if found is None:
            return
        buf, base, pos, end, size = found
        span[:] = [pos, pos]
        data = pa.py_buffer(buf)
        try:
            yield from _decode(
                buf, data, base, pos, end, size, batch_rows, skipped, exact_end, span
            )
        finally:
            # The mapping cannot close while Arrow still exports it.
            del data


class RangeWritten(NamedTuple):
    """What ``write_range_parquet`` wrote: records, and the damaged or
    quarantined stretches stepped over (count, bytes)."""

    rows: int
    skipped: int = 0
    skipped_bytes: int = 0
    #: Where the range's first record starts (its end if none does) and where
    #: its records reach: ``reader`` checks that consecutive ranges meet.
    first: int = -1
    reach: int = -1


def write_range_parquet(
    item: tuple[int, str, int, int, int],
    out_dir: str,
    filesystem: Any = None,
    exact_end: bool = False,
) -> RangeWritten:
    """Decode range ``item = (index, path, base, start, end)`` into
    ``out_dir/part-<index>.parquet`` on ``filesystem`` (a ``pyarrow.fs``
    filesystem, the local one by default): the log is read here, the file
    may be written to an object store."""
    import pyarrow.fs as pafs
    import pyarrow.parquet as pq

    fs = filesystem or pafs.LocalFileSystem()
    index, *rng = item
    rows = 0
    skipped: list[int] = []
    span: list[int] = []
    writer = None
    # A batch's positions list and the rare row-decoded batch's 65,536 tuples
    # hold no cycles: the cyclic collector would only traverse them again and
    # again.
    collecting = gc.isenabled()
    gc.disable()
    try:
        for batch in decode_range(
            tuple(rng),  # type: ignore[arg-type]
            skipped=skipped,
            exact_end=exact_end,
            span=span,
        ):
            if writer is None:
                fs.create_dir(out_dir, recursive=True)
                writer = pq.ParquetWriter(
                    f"{out_dir.rstrip('/')}/part-{index:05d}.parquet",
                    scan.ARROW_SCHEMA,
                    filesystem=fs,
                )
            writer.write_batch(batch)
            rows += batch.num_rows
    finally:
        if collecting:
            gc.enable()
        if writer is not None:
            writer.close()
    return RangeWritten(rows, len(skipped), sum(skipped), *span)


def _decode(
    buf: Any,
    data: pa.Buffer,
    base: int,
    pos: int,
    end: int,
    size: int,
    limit: int,
    skipped: list[int] | None = None,
    exact_end: bool = False,
    span: list[int] | None = None,
) -> Iterator[pa.RecordBatch]:
    reach = span if span is not None else [pos, pos]
    while pos < end:
        positions, wide, stop = _hop(buf, base, pos, end, size, limit)
        after = positions[-1]
        if len(positions) > 1:
            batch = None if wide else _columns(positions, data)
            if batch is None:
                rows = list(scan.iter_records(buf, base, pos, after, size))
                batch = scan.record_batch(rows)
            yield batch
        if stop:
            # A quarantined range or damage: go on after it (the row decoder's
            # rule, ``scan.next_record``); zeros end the data, and are damage
            # themselves when the range's end is the log's known end.
            nxt = (
                scan.next_record(buf, base, after, end, size, exact_end)
                if after < end
                else None
            )
            if nxt is None:
                lost, reach[1] = scan.lost_at_end(buf, after, end, size, exact_end)
                if lost and skipped is not None:
                    skipped.append(lost)
                return
            if skipped is not None:
                skipped.append(nxt - after)
            after = nxt
        pos = reach[1] = after


def _hop(
    buf: Any, base: int, pos: int, end: int, size: int, limit: int
) -> tuple[list[int], bool, bool]:
    """Walk up to ``limit`` records from ``pos``; return their positions and
    the position after the last, whether a record has a two-byte topic length
    (left to the row decoder) and whether the data ends there.

    Stops where ``scan.iter_records`` stops: at a record whose sizes, offset
    or CRCs (body and whole record, ``record.intact``) are wrong.
    """
    hop = struct.Struct(_HOP).unpack_from
    intact = record.intact
    magic_v1, magic_v2 = record.MAGIC_V1, record.MAGIC_V2
    min_size, hsize = record.MIN_RECORD_SIZE, record.HEADER_SIZE
    positions: list[int] = []
    add = positions.append
    wide = False
    n = 0
    while n < limit and pos < end:
        if pos + hsize > size:
            add(pos)
            return positions, wide, True
        total, magic, phys = hop(buf, pos)
        if magic != magic_v1:
            if magic != magic_v2:
                break
            wide = True
        if (
            total < min_size
            or pos + total > size
            or phys != base + pos
            or not intact(buf, pos, total, phys)
        ):
            break
        add(pos)
        pos += total
        n += 1
    else:
        add(pos)
        return positions, wide, False
    add(pos)
    return positions, wide, True


def _gather(data: pa.Buffer, starts: pa.Array, stops: pa.Array) -> pa.Array:
    """Return ``data[starts[i]:stops[i]]`` for every i, as one binary array.

    The spans must be in order and must not overlap (checked by the caller):
    they become the even elements of a binary array over ``data`` whose odd
    elements are the gaps between them.
    """
    n = len(starts)
    bounds = pa.chunked_array([starts, stops], pa.int64()).combine_chunks()
    offsets = bounds.take(_cached_indices("pairs", n))
    spans = pa.Array.from_buffers(
        pa.large_binary(), 2 * n - 1, [None, offsets.buffers()[1], data]
    )
    return spans.take(_cached_indices("even", n))


def _cached_indices(kind: str, n: int) -> pa.Array:
    """Return take indices: ``pairs`` interleaves two concatenated arrays of
    ``n`` values (0, n, 1, n + 1, ...); ``even`` is 0, 2, ..., 2n - 2."""
    cached = _take_indices.get((kind, n))
    if cached is None:
        if kind == "pairs":
            values = [v for j in range(n) for v in (j, n + j)]
        else:
            values = list(range(0, 2 * n, 2))
        cached = pa.array(values, pa.int64())
        # Batches are full but the last of each range: keep a few sizes.
        if len(_take_indices) < 16:
            _take_indices[(kind, n)] = cached
    return cached


def _be_column(parts: pa.Array, offset: int, width: int, kind: pa.DataType) -> pa.Array:
    """Return the big-endian integer at ``offset`` of every element of ``parts``."""
    n = len(parts)
    field = pc.binary_slice(parts, offset, offset + width) if offset else parts
    raw = field.buffers()[2]
    values = array.array(_ARRAY_CODES[width])
    assert values.itemsize == width
    values.frombytes(memoryview(raw)[: n * width])
    if _SWAP and width > 1:
        values.byteswap()
    return pa.Array.from_buffers(kind, n, [None, pa.py_buffer(values)])


def _all(mask: pa.Array) -> bool:
    return bool(pc.all(mask).as_py())


def _columns(positions: list[int], data: pa.Buffer) -> pa.RecordBatch | None:
    """Return the batch of the records at ``positions`` (the last entry is the
    position after them), None when the row decoder must take it: IPv6 hosts,
    lengths that do not fit the record, text that is not UTF-8."""
    n = len(positions) - 1
    starts = pa.array(positions[:-1], pa.int64())
    nexts = pa.array(positions[1:], pa.int64())
    heads = _gather(data, starts, pc.add(starts, record.HEADER_SIZE))
    columns = {
        name: _be_column(heads, offset, width, scan.ARROW_SCHEMA.field(name).type)
        for name, offset, width in _FIELDS
    }
    if not _all(pc.equal(pc.bit_wise_and(columns["sysflag"], scan._V6), 0)):
        return None
    body = columns["body_size"].cast(pa.int64())
    # Topic length byte, topic, properties length, properties: each must lie
    # in its record, after the part before it.
    tpos = pc.add(pc.add(starts, record.HEADER_SIZE), body)
    if not _all(pc.and_(pc.greater_equal(body, 0), pc.less_equal(tpos, nexts))):
        return None
    if not _all(pc.less_equal(pc.add(tpos, 3), nexts)):
        return None
    ts = pc.add(tpos, 1)
    tlen = _be_column(_gather(data, tpos, ts), 0, 1, pa.uint8()).cast(pa.int64())
    te = pc.add(ts, tlen)
    if not _all(pc.less_equal(pc.add(te, 2), nexts)):
        return None
    ps = pc.add(te, 2)
    plen = _be_column(_gather(data, te, ps), 0, 2, pa.uint16()).cast(pa.int64())
    pe = pc.add(ps, plen)
    if not _all(pc.less_equal(pe, nexts)):
        return None
    try:
        topics = _gather(data, ts, te).cast(pa.string())
        texts = _gather(data, ps, pe).cast(pa.string())
    except pa.ArrowInvalid:
        return None
    columns["topic"] = topics
    tags = pc.struct_field(pc.extract_regex(texts, _TAGS_RE), [0])
    keys = pc.struct_field(pc.extract_regex(texts, _KEYS_RE), [0])
    # Every property with a value holds at least one name-value separator, so
    # when the separators are exactly the ones of tags, keys, id and CRC (each
    # with a value), no other property is there and no value holds a separator.
    known = pc.add(
        pc.add(tags.is_valid().cast(pa.int32()), keys.is_valid().cast(pa.int32())),
        pc.add(
            pc.match_substring_regex(texts, _UNIQ_RE).cast(pa.int32()),
            pc.match_substring_regex(texts, _CRC_RE).cast(pa.int32()),
        ),
    )
    system = pc.starts_with(topics, scan._SYSTEM_PREFIXES[0])
    for prefix in scan._SYSTEM_PREFIXES[1:]:
        system = pc.or_(system, pc.starts_with(topics, prefix))
    parse = pc.or_(system, pc.not_equal(pc.count_substring(texts, "\x01"), known))
    columns["tags"], columns["keys"], columns["properties"] = _properties(
        texts, system, parse, tags, keys
    )
    assert len(topics) == n
    return pa.RecordBatch.from_arrays(
        [columns[name] for name in scan.COLUMNS], schema=scan.ARROW_SCHEMA
    )


def _properties(
    texts: pa.Array, system: pa.Array, parse: pa.Array, tags: pa.Array, keys: pa.Array
) -> tuple[pa.Array, pa.Array, pa.Array]:
    """Return tags, keys and the kept-properties map, parsing in Python the
    records ``parse`` selects."""
    map_type = scan.ARROW_SCHEMA.field("properties").type
    rows = pc.indices_nonzero(parse).to_pylist()
    if not rows:
        empty = pa.array([], pa.string())
        props = pa.MapArray.from_arrays(
            pa.array([0] * (len(texts) + 1), pa.int32()), empty, empty, type=map_type
        )
        return tags, keys, props
    tag_list, key_list = tags.to_pylist(), keys.to_pylist()
    prop_list: list[list[tuple[str, str]]] = [[]] * len(texts)
    system_rows = system.to_pylist()
    for i in rows:
        tag_list[i], key_list[i], prop_list[i] = scan.parse_properties(
            texts[i].as_py(), system_rows[i]
        )
    return (
        pa.array(tag_list, pa.string()),
        pa.array(key_list, pa.string()),
        pa.array(prop_list, map_type),
    )
