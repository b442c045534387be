"""The commit log: records appended to a queue of segments (RocketMQ ``CommitLog``).

Callers hold the append lock while they call ``append``; readers read any
offset below the shared commit position without a lock.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from broker_core.errors import (
    CorruptRecordError,
    MessageNotFoundError,
    MessageTooLargeError,
    StoreError,
)
from broker_core.message import MessageExt
from broker_core.record import (
    BLANK,
    BLANK_MAGIC,
    PHYSICAL_OFFSET_AT,
    RecordCheck,
    blank_fills_segment,
    check_record,
    decode_record,
    find_record,
    intact,
    starts_record,
)
from broker_core.segment import Segment
from broker_core.segment_queue import SegmentQueue

PHYS = struct.Struct(">q")
#: How far past a damaged or zeroed position the last segment is searched for
#: a valid record (more than the largest record, 4 MiB body + 64 KiB).
MAX_RECORD_SEARCH = 8 << 20
_NOTHING_TRUSTED = 1 << 62


@dataclass(frozen=True, slots=True)
class Damage:
    """A byte range of the log that holds no valid record: ``[start, end)``.

    ``end`` is -1 for a damaged tail (no valid record follows); ``reason`` is
    ``corrupt`` (checks failed) or ``end`` (zeros where records continue).
    """

    start: int
    end: int
    reason: str


log = logging.getLogger(__name__)


class CommitLog:
    """The segments of ``{root}/commitlog``."""

    def __init__(self, root: Path, segment_size: int, readonly: bool = False) -> None:
        self.segment_size = segment_size
        self.segments = SegmentQueue(root / "commitlog", segment_size, readonly)
        #: Returns the offset from which records were appended by this run's
        #: live processes (``SharedState.trusted_from``): reads skip their CRC
        #: check. Without an open store nothing is trusted.
        self.trusted_from: Callable[[], int] = lambda: _NOTHING_TRUSTED

    # -- appending -----------------------------------------------------------
    def segment_end(self, pos: int) -> int:
        """Return the end offset of the segment holding ``pos``."""
        return pos - pos % self.segment_size + self.segment_size

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

    def discard(self, start: int, end: int) -> None:
        """Zero ``[start, end)`` after a failed append (segment by segment).

        Failure to discard is logged, not raised: the bytes lie past the commit
        position, so the next append overwrites them and recovery cuts them.
        """
        pos = start
        while pos < end:
            seg = self.segments.segment(pos)
            stop = min(end, self.segment_end(pos))
            if seg is not None:
                try:
                    seg.discard(pos - seg.base, stop - seg.base)
                except StoreError as exc:
                    log.error("could not discard a failed append: %s", exc)
            pos = stop

    # -- reading -------------------------------------------------------------
    def segment_at(self, offset: int) -> Segment:
        seg = self.segments.segment(offset)
        if seg is None:
            raise MessageNotFoundError(f"no commit-log segment holds offset {offset}")
        return seg

    def read_message(self, offset: int, limit: int) -> MessageExt:
        """Decode the record at ``offset``; ``limit`` is the commit position.

        Raises ``MessageNotFoundError`` if no record starts there and
        ``CorruptRecordError`` (a ``MessageNotFoundError`` too) if the record
        there fails its CRCs, checked even for records this run appended
        (``trusted_from`` spares only scans and consumers' reads): damaged
        bytes are never served.
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
        # A single look-up (an operator's, a client's by id) always checks the
        # CRCs, of records this run appended too: it costs one record's.
        if not intact(seg.view, pos, chk.size, offset):
            raise CorruptRecordError(
                f"the record at offset {offset} is damaged (CRC mismatch); "
                "run 'python -m broker_core verify --repair' to quarantine it"
            )
        msg = decode_record(seg.view, pos)
        if msg.commit_log_offset != offset:
            raise MessageNotFoundError(f"no record starts at offset {offset}")
        return msg

    def decode_at(self, offset: int, size: int | None = None) -> MessageExt:
        """Decode the record a consume-queue unit points at, checking its CRCs.

        Raises ``CorruptRecordError`` (a ``MessageNotFoundError``) if it is damaged.
        """
        seg = self.segments.segment(offset)
        if seg is None:
            raise MessageNotFoundError(f"no commit-log segment holds offset {offset}")
        pos = offset - seg.base
        if size is None:
            chk = check_record(seg.view, pos, seg.size, verify_crc=False)
            size = chk.size if chk.status is RecordCheck.OK else 0
        if offset < self.trusted_from():
            if not intact(seg.view, pos, size, offset):
                raise CorruptRecordError(f"the record at offset {offset} is damaged")
        elif not starts_record(seg.view, pos, size, offset):
            raise MessageNotFoundError(
                f"no record of {size} bytes starts at offset {offset}"
            )
        return decode_record(seg.view, pos, size)

    def scan(
        self,
        start: int,
        end: int | None = None,
        verify_crc: bool = False,
        damage: list[Damage] | None = None,
        tail_hint: int | None = None,
        trust: bool = True,
    ) -> Iterator[tuple[Segment, int, int]]:
        """Yield ``(segment, position, size)`` of each valid record from ``start``.

        Damaged bytes never end the scan early: it resynchronises at the next
        valid record (its magic, its own offset, and with ``verify_crc`` its
        CRCs) and appends the skipped range to ``damage``. Quarantined ranges
        (``SKIP``) are stepped over. The scan stops at ``end``, or without
        ``end`` at the end of the written data: zeros, or a damaged tail with no
        valid record after it. ``tail_hint`` is where committed data ends (the
        shared commit position a killed process left, or the checkpoint's
        flushed offset): damage below it is resynchronised over, damage at or
        past it is a torn tail and ends the scan (records after it were never
        committed). With ``trust`` the CRCs of records
        this run appended (``trusted_from``) are not recomputed; the scrubber
        passes False. ``last_end`` then holds the offset
        after the last valid record; ``stopped_on_corruption`` says whether a
        damaged tail ended it.
        """
        self.last_end = start
        self.stopped_on_corruption = False
        offset = start
        # Records this run appended are checked for structure, not CRCs.
        trusted = self.trusted_from() if verify_crc and trust else _NOTHING_TRUSTED
        while end is None or offset < end:
            seg = self.segments.segment(offset)
            if seg is None:
                # A segment file missing between others (deleted): its
                # records are lost, the later segments' are not. Step over
                # the gap; the log does not end here.
                bases = self.segments.list_bases()
                later = [b for b in bases if b > offset]
                if not bases or offset < bases[0] or not later:
                    return
                if end is not None and later[0] >= end:
                    return
                if damage is not None:
                    damage.append(Damage(offset, later[0], "missing"))
                offset = self.last_end = later[0]
                continue
            pos = offset - seg.base
            if pos >= seg.size:
                # A segment file shorter than the log's segments (truncated;
                # mapped read-only as it is): the rest of it is missing.
                following = seg.base + self.segment_size
                later = [b for b in self.segments.list_bases() if b >= following]
                if not later or (end is not None and later[0] >= end):
                    if damage is not None and (tail_hint or 0) > offset:
                        damage.append(Damage(offset, -1, "missing"))
                    return
                if damage is not None:
                    damage.append(Damage(offset, later[0], "missing"))
                offset = self.last_end = later[0]
                continue
            if end is None:
                # Up to the written data only: past it a read could SIGBUS.
                limit = seg.data_end(pos)
            else:
                limit = min(seg.size, end - seg.base)
            crc = verify_crc and offset < trusted
            chk = check_record(seg.view, pos, limit, crc, crc)
            status = chk.status
            if status is RecordCheck.CORRUPT and end is None and pos + 8 <= limit:
                # A blank's filler may lie in a hole past the data end.
                total, magic = BLANK.unpack_from(seg.view, pos)
                if magic == BLANK_MAGIC and pos + total == seg.size:
                    status = RecordCheck.BLANK
            if status is RecordCheck.BLANK and not blank_fills_segment(
                seg.view, pos, seg.size, seg.data_end
            ):
                # A marker over records (forged, or damage reading as one):
                # the records after it are the log's, not a segment's rest.
                status = RecordCheck.CORRUPT
            if (
                status is RecordCheck.OK
                and PHYS.unpack_from(seg.view, pos + PHYSICAL_OFFSET_AT)[0] != offset
            ):
                # A well-formed record from before a truncation, not this log's.
                status = RecordCheck.CORRUPT
            if status is RecordCheck.OK:
                yield seg, pos, chk.size
                offset += chk.size
                self.last_end = offset
                continue
            if status is RecordCheck.SKIP:
                offset += chk.size
                self.last_end = offset
                continue
            if status is RecordCheck.BLANK:
                offset = seg.base + seg.size
                self.last_end = offset
                if self.segments.segment(offset) is None and not any(
                    b > offset for b in self.segments.list_bases()
                ):
                    # A blank with no next segment still ends the written data;
                    # the next append starts the new segment. (With a later
                    # one the next file is missing: stepped over above.)
                    return
                continue
            # Zeros or damage. Past the last committed position it is a torn
            # tail: what follows is a killed appender's leftovers, never
            # committed nor acknowledged, and a stale record there may even
            # reuse a queue offset a committed one took since. Cut there, as
            # RocketMQ does. Below it, step over to the next valid record.
            if end is not None or tail_hint is None or offset < tail_hint:
                nxt = self._resync(seg, pos, limit, end, tail_hint, verify_crc)
                if nxt is not None:
                    if damage is not None:
                        damage.append(Damage(offset, nxt, status.value))
                    offset = self.last_end = nxt
                    continue
            if status is RecordCheck.CORRUPT:
                self.stopped_on_corruption = True
                if damage is not None:
                    damage.append(Damage(offset, -1, "tail"))
            return

    def _resync(
        self,
        seg: Segment,
        pos: int,
        limit: int,
        end: int | None,
        tail_hint: int | None,
        verify_crc: bool,
    ) -> int | None:
        """Return the offset where valid records go on after the non-record at
        ``pos``: the next valid record in the segment, else the next segment
        (if there is one within the scan); None if the data ends here."""
        following = seg.base + self.segment_size
        # A later segment, even past a missing one (stepped over by scan).
        has_next = any(b >= following for b in self.segments.list_bases())
        search_end = limit
        if end is None and tail_hint is not None:
            # Only records that end by the committed position were committed.
            search_end = min(limit, tail_hint - seg.base)
        elif end is None and not has_next:
            search_end = min(limit, pos + MAX_RECORD_SEARCH)
        found = find_record(seg.view, seg.mm, pos + 1, search_end, seg.base, verify_crc)
        if found >= 0:
            return seg.base + found
        if has_next and (end is None or following < end):
            return following
        return None

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
