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
    def segment_end(self, pos: int) -> int:
        """Return the end offset of the segment holding ``pos``."""
        return pos - pos % self.segment_size + self.segment_size

    def fits(self, pos: int, total: int) -> bool:
        """Whether a ``total``-byte record fits at ``pos``, 8 bytes to spare (§3.1)."""
        return pos + total + 8 <= pos - pos % self.segment_size + self.segment_size

    def blank(self, pos: int) -> bytes:
        """Return the end-of-segment marker for a segment filled up to ``pos``."""
        return BLANK.pack(self.segment_end(pos) - pos, BLANK_MAGIC)

    def check_fits_segment(self, total: int) -> None:
        if total + 8 > self.segment_size:
            raise MessageTooLargeError(
                f"a record of {total} bytes does not fit "
                f"a {self.segment_size}-byte segment"
            )

    def write(self, start: int, parts: list[bytes]) -> None:
        """Write the joined ``parts`` at ``start`` (they must not cross a segment)."""
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
            raise MessageNotFoundError(
                f"offset {offset} is outside the log [0, {limit})"
            )
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

    def decode_at(self, offset: int, size: int | None = None) -> MessageExt:
        """Decode the record at ``offset`` trusting a consume-queue unit (no checks)."""
        seg = self.segments.segment(offset)
        if seg is None:
            raise MessageNotFoundError(f"no commit-log segment holds offset {offset}")
        return decode_record(seg.view, offset - seg.base, size)

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
            chk = check_record(seg.view, pos, limit, verify_crc, verify_crc)
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
