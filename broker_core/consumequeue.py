"""Consume queues: per (topic, queue id) arrays of 20-byte units.

Unit ``k`` (logical offset k) sits at byte ``k * 20`` and holds the record's
commit-log offset, size and tag hash code. Units are written only for records
below the log's commit position, always as a dense prefix, so a zero size marks
the end; every process finds new units by reading forward from its last known
end, with no message between processes.
"""

from __future__ import annotations

import os
import struct
import zlib
from pathlib import Path

from broker_core.segment_queue import SegmentQueue

# commitLogOffset q | check B, size 3 bytes | tagsCode q  (big-endian; tag
# field at byte 12). The size field's high byte is the unit's check: a byte of
# the CRC32 of the unit with it zero, never 0 (0: a unit written before units
# had checks, taken as it is). Records are far smaller than 16 MiB.
_RAW = struct.Struct(">qIq")
UNIT_SIZE = _RAW.size  # 20
_SIZE_FIELD = struct.Struct(">I")
_CHECKED = struct.Struct(">qiq")
SIZE_MASK = 0xFFFFFF
#: The size a unit that fails its check reads as: no record has it (a
#: placeholder is 1), so every reader takes the unit as damaged and the store
#: rebuilds the run from the log (a flipped tag code hid a message from its
#: tag's subscribers until ``verify --repair``).
DAMAGED_UNIT_SIZE = 2


def unit_check(phys: int, size: int, code: int) -> int:
    """The check byte of a unit (1..255)."""
    return (zlib.crc32(_CHECKED.pack(phys, size, code)) & 0xFF) or 1


def pack_unit(phys: int, size: int, code: int) -> bytes:
    """One unit, its check in the size field's high byte (a size of 0 or less
    is no unit: its field stays 0, the queue's end)."""
    if size <= 0:
        return _RAW.pack(phys, 0, code)
    return _RAW.pack(phys, size | unit_check(phys, size, code) << 24, code)


def decode_unit(phys: int, raw: int, code: int) -> tuple[int, int, int]:
    """``(offset, size, tag code)`` of a unit read as ``_RAW``; the size is
    ``DAMAGED_UNIT_SIZE`` when the unit fails its check."""
    size = raw & SIZE_MASK
    check = raw >> 24
    if check and check != unit_check(phys, size, code):
        return phys, DAMAGED_UNIT_SIZE, code
    return phys, size, code


class ConsumeQueue:
    """The units of one (topic, queue id)."""

    def __init__(
        self, root: Path, topic: str, queue_id: int, units_per_file: int
    ) -> None:
        self.topic = topic
        self.queue_id = queue_id
        self.units_per_file = units_per_file
        self.segments = SegmentQueue(
            root / "consumequeue" / topic / str(queue_id), units_per_file * UNIT_SIZE
        )
        self._max: int | None = None
        self._min: int | None = None
        #: Units below this have blocks in this process's view (``reserve``).
        self.reserved_upto = 0
        #: Units below this are known flushed by this process.
        self.flushed_offset = 0

    # -- offsets -------------------------------------------------------------
    def _unit_size_at(self, offset: int) -> int:
        seg = self.segments.segment(offset * UNIT_SIZE)
        if seg is None:
            return 0
        at = (offset % self.units_per_file) * UNIT_SIZE
        # Never read a hole (SIGBUS on a full tmpfs): units are a dense prefix.
        if not seg.readable(at, UNIT_SIZE):
            return 0
        return int(_SIZE_FIELD.unpack_from(seg.view, at + 8)[0])

    def _load_max(self) -> int:
        bases = self.segments.list_bases()
        for base in reversed(bases):
            first = base // UNIT_SIZE
            if self._unit_size_at(first) == 0:
                continue
            lo, hi = first, first + self.units_per_file  # lo holds data, hi not
            while hi - lo > 1:
                mid = (lo + hi) // 2
                if self._unit_size_at(mid) > 0:
                    lo = mid
                else:
                    hi = mid
            return hi
        return bases[0] // UNIT_SIZE if bases else 0

    def max_offset(self) -> int:
        """Return the next logical offset (units written by any process included)."""
        m = self._max
        if m is None:
            m = self._load_max()
        while self._unit_size_at(m) > 0:
            m += 1
        self._max = m
        return m

    @property
    def cached_max(self) -> int | None:
        """The end last seen by this process (None before the first look)."""
        return self._max

    def min_offset(self) -> int:
        """The first logical offset on disk (cached: segments are never purged)."""
        if self._min is None:
            bases = self.segments.list_bases()
            if not bases:
                return 0
            self._min = bases[0] // UNIT_SIZE
        return self._min

    # -- writing -------------------------------------------------------------
    def put_units(self, first: int, units: list[tuple[int, int, int]]) -> None:
        """Write ``units`` (offset, size, tag code) at logical offsets ``first``...."""
        per = self.units_per_file
        i = 0
        n = len(units)
        while i < n:
            off = first + i
            room = per - off % per
            chunk = units[i : i + room]
            seg = self.segments.segment(off * UNIT_SIZE, create=True)
            assert seg is not None
            data = b"".join([pack_unit(*u) for u in chunk])
            seg.write_mapped((off % per) * UNIT_SIZE, data)
            i += len(chunk)
        end = first + n
        if self._max is not None and end > self._max:
            self._max = end

    def reserve(self, first: int, count: int) -> None:
        """Allocate the blocks of units ``first...first + count`` before writing.

        Units are written through the mapping; reserving first turns a full disk
        into ``StorageFullError`` before the log is committed, never a SIGBUS.
        """
        if first + count < self.reserved_upto:
            return  # one comparison on the append path
        per = self.units_per_file
        off, end = first, first + count
        while off < end:
            file_first = off - off % per
            stop = min(end, file_first + per)
            seg = self.segments.segment(off * UNIT_SIZE, create=True)
            assert seg is not None
            # One unit more: readers find the end by reading the next unit.
            want = min(per, stop - file_first + 1) * UNIT_SIZE
            seg.reserve(want, ahead=64 << 10)
            self.reserved_upto = file_first + seg.allocated // UNIT_SIZE
            off = stop

    def put_packed(self, first: int, count: int, data: bytes) -> None:
        """Write ``count`` already packed units at logical offset ``first``."""
        per = self.units_per_file
        if first % per + count <= per:
            seg = self.segments.segment(first * UNIT_SIZE, create=True)
            assert seg is not None
            seg.write_mapped((first % per) * UNIT_SIZE, data)
            end = first + count
            if self._max is not None and end > self._max:
                self._max = end
        else:
            self.put_units(first, [decode_unit(*u) for u in _RAW.iter_unpack(data)])

    # -- reading -------------------------------------------------------------
    def read_units(self, start: int, count: int) -> list[tuple[int, int, int]]:
        """Return up to ``count`` units from logical offset ``start``."""
        per = self.units_per_file
        out: list[tuple[int, int, int]] = []
        off = start
        while len(out) < count:
            seg = self.segments.segment(off * UNIT_SIZE)
            if seg is None:
                break
            pos = (off % per) * UNIT_SIZE
            take = min(count - len(out), per - off % per)
            if not seg.readable(pos, take * UNIT_SIZE):
                take = max(0, (seg.data_hint - pos) // UNIT_SIZE)
                if take == 0:
                    break
            got = 0
            for phys, raw, code in _RAW.iter_unpack(
                seg.view[pos : pos + take * UNIT_SIZE]
            ):
                if raw == 0:
                    return out  # the queue's end (units are a dense prefix)
                out.append(decode_unit(phys, raw, code))
                got += 1
            off += got
            if got < take:
                break
        return out

    # -- maintenance ---------------------------------------------------------
    def files_whole(self) -> bool:
        """Whether every file of the queue has its full size (none was cut short)."""
        want = self.segments.segment_size
        bases = self.segments.list_bases()
        if bases and bases != list(range(bases[0], bases[-1] + want, want)):
            return False  # a file in the middle is missing
        for base in bases:
            path = self.segments.directory / f"{base:020d}"
            try:
                if path.stat().st_size != want:
                    return False
            except FileNotFoundError:
                return False
        return True

    def clear(self) -> None:
        """Delete every unit (before a rebuild from the log)."""
        self.segments.close()
        for base in self.segments.list_bases():
            (self.segments.directory / f"{base:020d}").unlink()
        self.reserved_upto = 0
        self._max = None
        self._min = None
        self.flushed_offset = 0

    def truncate_beyond(self, log_end: int) -> None:
        """Zero units that point at or past ``log_end`` (after the log is cut)."""
        m = self.max_offset()
        k = m
        while k > 0:
            units = self.read_units(k - 1, 1)
            if not units or units[0][0] + units[0][1] <= log_end:
                break
            k -= 1
        if k < m:
            self.segments.delete_from(k * UNIT_SIZE)
            self.reserved_upto = 0  # the cut gave blocks back
        self._max = k

    def flush(self) -> None:
        """Flush units written since the last flush of this process."""
        end = self.max_offset()
        if end > self.flushed_offset:
            self.segments.flush(self.flushed_offset * UNIT_SIZE, end * UNIT_SIZE)
            self.flushed_offset = end

    def close(self) -> None:
        self.segments.close()


class ConsumeQueueTable:
    """Every consume queue of a store, opened lazily."""

    def __init__(self, root: Path, units_per_file: int) -> None:
        self.root = root
        self.units_per_file = units_per_file
        self.queues: dict[tuple[str, int], ConsumeQueue] = {}

    def get(self, topic: str, queue_id: int) -> ConsumeQueue:
        cq = self.queues.get((topic, queue_id))
        if cq is None:
            cq = ConsumeQueue(self.root, topic, queue_id, self.units_per_file)
            self.queues[(topic, queue_id)] = cq
        return cq

    def on_disk(self) -> list[tuple[str, int]]:
        """Return every (topic, queue id) with a directory under ``consumequeue/``."""
        base = self.root / "consumequeue"
        out: list[tuple[str, int]] = []
        if base.is_dir():
            for topic in os.listdir(base):
                tdir = base / topic
                if tdir.is_dir():
                    out.extend((topic, int(q)) for q in os.listdir(tdir) if q.isdigit())
        return sorted(out)

    def forget(self) -> None:
        """Drop every cached queue without unmapping (readers may still hold one)."""
        self.queues = {}

    def drop(self, topic: str) -> None:
        """Forget and delete every queue of ``topic``."""
        for key in [k for k in self.queues if k[0] == topic]:
            self.queues.pop(key).close()
        tdir = self.root / "consumequeue" / topic
        if tdir.is_dir():
            for qdir in tdir.iterdir():
                for f in qdir.iterdir():
                    f.unlink()
                qdir.rmdir()
            tdir.rmdir()

    def flush(self) -> None:
        for cq in list(self.queues.values()):
            cq.flush()

    def close(self) -> None:
        for cq in self.queues.values():
            cq.close()
        self.queues.clear()
