"""One fixed-size memory-mapped segment file (RocketMQ ``MappedFile``).

A segment is created sparse at its full size and mapped shared, so every
process that maps it sees the others' writes at once through the page cache;
``flush`` makes them durable.
"""

from __future__ import annotations

import mmap
import os
from pathlib import Path

from broker_core.diskio import (
    hole_reads_can_fault,
    pwrite_all,
    reserve,
    storage_error,
    zero_range,
)
from broker_core.errors import StoreError


def offset_to_name(offset: int) -> str:
    """Return a segment file name: the base offset as 20 zero-padded digits."""
    return f"{offset:020d}"


#: Disk blocks reserved ahead of the write position (``Segment.reserve``).
ALLOCATE_AHEAD = 32 << 20
#: Free bytes a reservation ahead leaves to the rest of the store (queues, index).
RESERVE_HEADROOM = 4 << 20


class Segment:
    """A mapped file of ``size`` bytes whose first byte has offset ``base``.

    With ``readonly`` the file is opened and mapped for reading only and never
    extended: ``inspect`` and ``verify`` can look at a store on a full disk.
    """

    __slots__ = (
        "path", "base", "size", "_fd", "_mm", "view", "_allocated", "_can_reserve",
        "_data_hint", "_probe_holes",
    )  # fmt: skip

    def __init__(
        self, path: Path, base: int, size: int, create: bool, readonly: bool = False
    ) -> None:
        self.path = path
        self.base = base
        self.size = size
        #: Bytes from the start known to be data, not holes (see ``readable``).
        self._data_hint = 0
        flags = os.O_RDONLY if readonly else os.O_RDWR | (os.O_CREAT if create else 0)
        try:
            self._fd = os.open(path, flags, 0o644)
        except FileNotFoundError:
            raise
        except OSError as exc:
            raise StoreError(f"cannot open segment {path}: {exc}") from exc
        #: Whether readers must stop at holes (tmpfs only: ``data_end``).
        self._probe_holes = hole_reads_can_fault(self._fd)
        if readonly:
            have = os.fstat(self._fd).st_size
            self.size = size = min(size, have)
            if size == 0:
                self._mm = None
                self.view = memoryview(b"")
            else:
                self._mm = mmap.mmap(self._fd, size, mmap.MAP_SHARED, mmap.PROT_READ)
                self.view = memoryview(self._mm)
            self._allocated = size
            self._can_reserve = False
            return
        if os.fstat(self._fd).st_size < size:
            # Sparse: blocks are reserved ahead of the writes (``reserve``).
            try:
                os.ftruncate(self._fd, size)
            except OSError as exc:
                os.close(self._fd)
                raise storage_error(exc, f"extending {path}") from exc
        self._mm = mmap.mmap(self._fd, size, mmap.MAP_SHARED)
        self.view = memoryview(self._mm)
        #: Bytes from the start known to have disk blocks (see ``reserve``).
        self._allocated = 0
        self._can_reserve = True

    @property
    def mm(self) -> mmap.mmap | bytes:
        """The mapping itself (its ``find`` searches in C)."""
        return self._mm if self._mm is not None else b""

    def data_end(self, pos: int) -> int:
        """Return where mapped reads from ``pos`` must stop: the next hole or the size.

        Reading a hole through a mapping of a full tmpfs kills the process with
        SIGBUS (the page must be allocated even to read zeros), so on tmpfs
        readers that look past the written data stop here (tmpfs counts reserved
        pages not yet written as holes: a safe under-estimate). On other
        filesystems a hole reads as zeros and this is the size
        (``hole_reads_can_fault``: there ``SEEK_HOLE`` can report a hole where
        data was just written).
        """
        if pos >= self.size or not self._probe_holes:
            return self.size
        try:
            return min(self.size, os.lseek(self._fd, pos, os.SEEK_HOLE))
        except OSError:
            return self.size

    @property
    def allocated(self) -> int:
        """Bytes from the start known to have blocks in this process's view."""
        return self._allocated

    @property
    def data_hint(self) -> int:
        """Bytes from the start last found to be data (``readable`` updates it)."""
        return self._data_hint

    def readable(self, pos: int, n: int) -> bool:
        """Whether ``[pos, pos + n)`` is data a mapped read may touch.

        For files written as a dense prefix from their start (consume queues):
        one ``lseek`` when a read passes the last known end of the data.
        """
        if pos + n <= self._data_hint:
            return True
        self._data_hint = self.data_end(0)
        return pos + n <= self._data_hint

    def overwrite(self, pos: int, data: bytes) -> None:
        """Write ``data`` over bytes that already have blocks (no reservation)."""
        pwrite_all(self._fd, data, pos, f"writing {self.path.name}")

    def write(self, pos: int, data: bytes | memoryview) -> None:
        """Write all of ``data`` at ``pos`` with ``pwrite`` (page cache only).

        ``pwrite`` into fresh pages of a sparse file is several times faster
        than faulting them in through the mapping; readers still see the bytes
        through their mappings, which share the page cache. Raises
        ``StorageFullError`` or ``StorageIOError``; bytes may then have been
        written in part (``discard`` them).
        """
        n = len(data)
        if pos + n + 8 > self._allocated:
            # 8 more: the end-of-data check reads 8 bytes past the last record.
            end = min(self.size, pos + n + 8)
            self.reserve(end, ahead=ALLOCATE_AHEAD, data_end=pos)
        try:
            done = os.pwrite(self._fd, data, pos)
        except OSError as exc:
            raise storage_error(exc, f"writing {self.path.name}") from exc
        if done != n:  # short: the rest, or a typed error
            what = f"writing {self.path.name}"
            pwrite_all(self._fd, memoryview(data)[done:], pos + done, what)

    def reserve(self, end: int, ahead: int = 0, data_end: int | None = None) -> None:
        """Make sure disk blocks exist up to ``end``, reserving ``ahead`` more.

        Writing into holes makes every page allocate blocks while it is
        written, and under a concurrent ``fdatasync`` each such write waits
        for the journal: measured here, appends into allocated blocks are
        2-3x faster. RocketMQ pre-faults whole files; reserving a window ahead
        (metadata only, no zeros written) gets most of it for little disk.
        The window never takes the last ``RESERVE_HEADROOM`` free bytes, and a
        failed reservation gives back what it took past ``data_end`` (the end of
        the bytes that hold data; default ``end``: nothing before it is ever
        given back). Raises ``StorageFullError`` when even ``end`` cannot be
        reserved.
        """
        if end <= self._allocated or not self._can_reserve:
            return
        target = min(self.size, end + ahead)
        if target > end:
            try:
                free = os.fstatvfs(self._fd)
                room = free.f_bavail * free.f_frsize - RESERVE_HEADROOM
            except OSError:
                room = target - self._allocated
            target = max(end, min(target, self._allocated + max(room, 0)))
        what = f"reserving disk blocks for {self.path.name}"
        keep = end if data_end is None else data_end
        start = self._allocated
        if not reserve(self._fd, start, target - start, what, max(start, keep)):
            # Not supported by this filesystem: write into holes as before.
            self._can_reserve = False
            self._allocated = self.size
            return
        self._allocated = target

    def write_mapped(self, pos: int, data: bytes | memoryview) -> None:
        """Copy small ``data`` through the mapping (blocks reserved first)."""
        end = pos + len(data)
        if end > self._allocated:
            self.reserve(end, ahead=64 << 10, data_end=pos)
        self.view[pos:end] = data

    def discard(self, pos: int, end: int) -> None:
        """Make ``[pos, end)`` zeros again after a failed write (needs no space)."""
        zero_range(self._fd, pos, end - pos, f"discarding in {self.path.name}")
        self._data_hint = min(self._data_hint, pos)
        # A punched hole has no blocks: reserve again before the next write.
        self._allocated = min(self._allocated, pos)

    def flush(self) -> None:
        """Write the segment's dirty pages to disk (fdatasync covers mmap writes)."""
        try:
            os.fdatasync(self._fd)
        except OSError as exc:
            raise storage_error(exc, f"flushing {self.path.name}") from exc

    def zero(self, pos: int, end: int | None = None) -> None:
        """Zero bytes ``pos`` to ``end`` (default the end), e.g. to cut a torn tail.

        No mapped write: on a full disk this raises instead of SIGBUS.
        """
        stop = self.size if end is None else end
        if stop > pos:
            self.discard(pos, stop)

    def unlinked(self) -> bool:
        """Whether the file was deleted (or renamed over) since it was mapped:
        this process still reads and writes it, nobody opening the store will."""
        try:
            return os.fstat(self._fd).st_nlink == 0
        except OSError:
            return False  # closed meanwhile: nothing to say

    def close(self) -> None:
        """Unmap and close; further access raises."""
        try:
            self.view.release()
            if self._mm is not None:
                self._mm.close()
        except BufferError:
            # A caller still holds a slice; the mapping goes when it is collected.
            pass
        os.close(self._fd)
