"""The commit log: records appended to a queue of segments (RocketMQ ``CommitLog``).

Callers hold the append lock while they call ``append``; readers read any
offset below the shared commit position without a lock.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path

from broker_core.errors import MessageNotFoundError, MessageTooLargeError
from broker_core.message import MessageExt
from broker_core.record import (
    BLANK,
    BLANK_MAGIC,
    HEADER,
    PHYSICAL_OFFSET_AT,
    CheckedRecord,
    RecordCheck,
    check_record,
    decode_record,
)
from broker_core.segment import Segment
from broker_core.segment_queue import SegmentQueue

PHYS = struct.Struct(">q")


class CommitLog:
    """The segments of ``{root}/commitlog``."""

    def __init__(self, root: Path, segment_size: int) -> None:
        self.segment_size = segment_size
        self.segments = SegmentQueue(root / "commitlog", segment_size)

    # -- appending -----------------------------------------------------------
    def append(
        self, pos: int, headers: list[list[int | bytes]], tails: list[bytes]
    ) -> tuple[list[int], int]:
        """Write records at ``pos``; return their offsets and the new end.

        ``headers[i]`` holds the ``HEADER`` fields with the physical offset slot
        (index 6) still to fill; ``tails[i]`` is body + topic + properties. A
        record that does not fit in the rest of a segment with 8 bytes to spare is
        preceded by a blank marker and goes to the next segment.
        """
        size = self.segment_size
        seg_end = pos - pos % size + size
        offsets: list[int] = []
        parts: list[bytes] = []
        chunk_start = pos
        pack = HEADER.pack
        for h, tail in zip(headers, tails, strict=True):
            total = h[0]
            assert isinstance(total, int)
            if pos + total + 8 > seg_end:
                if total + 8 > size:
                    raise MessageTooLargeError(
                        f"a record of {total} bytes does not fit a {size}-byte segment"
                    )
                parts.append(BLANK.pack(seg_end - pos, BLANK_MAGIC))
                self._write(chunk_start, parts)
                parts = []
                pos = chunk_start = seg_end
                seg_end += size
            h[6] = pos
            offsets.append(pos)
            parts.append(pack(*h))
            parts.append(tail)
            pos += total
        self._write(chunk_start, parts)
        return offsets, pos

    def _write(self, start: int, parts: list[bytes]) -> None:
        if not parts:
            return
        seg = self.segments.segment(start, create=True)
        assert seg is not None
        seg.write(start - seg.base, b"".join(parts))

    # -- reading -------------------------------------------------------------
    def segment_at(self, offset: int) -> Segment:
        seg = self.segments.segment(offset)
        if seg is None:
            raise MessageNotFoundError(f"no commit-log segment holds offset {offset}")
        return seg

    def read_message(self, offset: int, limit: int) -> MessageExt:
        """Decode the record at ``offset``; ``limit`` is the commit position.

        Raises ``MessageNotFoundError`` if no valid record starts there.
        """
        if offset < 0 or offset >= limit:
            raise MessageNotFoundError(f"offset {offset} is outside the log [0, {limit})")
        seg = self.segment_at(offset)
        pos = offset - seg.base
        end = min(seg.size, limit - seg.base)
        chk = check_record(seg.view, pos, end, verify_crc=False)
        if chk.status is not RecordCheck.OK:
            raise MessageNotFoundError(f"no record starts at offset {offset}")
        msg = decode_record(seg.view, pos)
        if msg.commit_log_offset != offset:
            raise MessageNotFoundError(f"no record starts at offset {offset}")
        return msg

    def decode_at(self, offset: int) -> MessageExt:
        """Decode the record at ``offset`` trusting a consume-queue unit (no checks)."""
        seg = self.segments.segment(offset)
        if seg is None:
            raise MessageNotFoundError(f"no commit-log segment holds offset {offset}")
        return decode_record(seg.view, offset - seg.base)

    def scan(
        self, start: int, end: int | None = None, verify_crc: bool = False
    ) -> Iterator[tuple[Segment, int, int]]:
        """Yield ``(segment, position, size)`` of each valid record from ``start``.

        Stops at ``end``, at the end of the written data, or at a damaged record;
        ``last_end`` then holds the offset after the last valid record.
        """
        self.last_end = start
        self.stopped_on_corruption = False
        offset = start
        while end is None or offset < end:
            seg = self.segments.segment(offset)
            if seg is None:
                return
            pos = offset - seg.base
            limit = seg.size if end is None else min(seg.size, end - seg.base)
            chk = check_record(seg.view, pos, limit, verify_crc)
            if (
                chk.status is RecordCheck.OK
                and PHYS.unpack_from(seg.view, pos + PHYSICAL_OFFSET_AT)[0] != offset
            ):
                # A well-formed record from before a truncation, not this log's.
                chk = CheckedRecord(RecordCheck.CORRUPT, 0)
            if chk.status is RecordCheck.OK:
                yield seg, pos, chk.size
                offset += chk.size
                self.last_end = offset
            elif chk.status is RecordCheck.BLANK:
                offset = seg.base + seg.size
                if self.segments.segment(offset) is None:
                    # A blank with no next segment still ends the written data;
                    # the next append starts the new segment.
                    self.last_end = offset
                    return
                self.last_end = offset
            else:
                self.stopped_on_corruption = chk.status is RecordCheck.CORRUPT
                return

    def first_offset(self) -> int:
        bases = self.segments.list_bases()
        return bases[0] if bases else 0

    def last_segment_base(self) -> int:
        bases = self.segments.list_bases()
        return bases[-1] if bases else 0

    # -- maintenance ---------------------------------------------------------
    def truncate(self, end: int) -> None:
        """Cut the log at ``end``: zero the rest of its segment, delete later ones."""
        self.segments.delete_from(end)

    def flush(self, start: int, end: int) -> None:
        self.segments.flush(start, end)

    def close(self) -> None:
        self.segments.close()

