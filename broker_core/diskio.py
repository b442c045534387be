"""Disk calls that tell the truth: whole writes, reserved blocks, typed errors.

Every store file is written through these functions. A write either lands
whole or raises ``StorageFullError`` / ``StorageIOError``; a mapped file is
written through its mapping only where ``reserve`` allocated blocks first, so a
full disk is an exception, never a SIGBUS.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import threading
import time
from typing import Any

from broker_core.errors import StorageFullError, StorageIOError

_FULL_ERRNOS = {errno.ENOSPC, errno.EDQUOT}
_UNSUPPORTED_ERRNOS = {errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL}
_FALLOC_FL_KEEP_SIZE = 0x01
_FALLOC_FL_PUNCH_HOLE = 0x02

#: ``statfs.f_type`` of tmpfs (linux/magic.h).
_TMPFS_MAGIC = 0x01021994

_fallocate: Any = None
_fstatfs: Any = None
try:
    _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    _fallocate = _libc.fallocate
    _fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
    _fallocate.restype = ctypes.c_int
    _fstatfs = _libc.fstatfs
    _fstatfs.argtypes = [ctypes.c_int, ctypes.c_void_p]
    _fstatfs.restype = ctypes.c_int
except (OSError, AttributeError):  # pragma: no cover - not glibc
    pass


def hole_reads_can_fault(fd: int) -> bool:
    """Whether reading a hole of ``fd`` through a mapping can kill the process.

    On tmpfs a mapped read of a hole must allocate a page, and on a full tmpfs
    that is a SIGBUS; readers of such files stop at the next hole
    (``Segment.data_end``). On disk filesystems a hole reads as the zero page
    and needs nothing, and there ``SEEK_HOLE`` is not a safe guide anyway: while
    the kernel writes back pages of reserved (unwritten) blocks it can report a
    hole where data was written moments before, which once made a reader
    under-count a queue's units. Unknown: assume it can.
    """
    if _fstatfs is None:  # pragma: no cover - not glibc
        return True
    buf = ctypes.create_string_buffer(256)  # struct statfs; f_type comes first
    if _fstatfs(fd, buf) != 0:
        return True
    f_type = ctypes.c_long.from_buffer(buf).value & 0xFFFFFFFF
    return f_type == _TMPFS_MAGIC


def storage_error(exc: OSError, what: str) -> StorageFullError | StorageIOError:
    """Return the typed error for an ``OSError`` raised while doing ``what``."""
    if exc.errno in _FULL_ERRNOS:
        return StorageFullError(f"{what}: the disk is full ({exc.strerror})")
    return StorageIOError(f"{what}: {exc.strerror or exc}")


def pwrite_all(fd: int, data: bytes | memoryview, pos: int, what: str) -> None:
    """Write all of ``data`` at ``pos`` or raise; a short write is retried once.

    A second short write (or one of zero bytes) means the disk is full.
    """
    view = memoryview(data)
    done = 0
    total = len(view)
    while done < total:
        try:
            n = os.pwrite(fd, view[done:], pos + done)
        except OSError as exc:
            raise storage_error(exc, what) from exc
        if n <= 0:
            raise StorageFullError(
                f"{what}: wrote {done} of {total} bytes (the disk is full)"
            )
        done += n


def reserve(
    fd: int, start: int, length: int, what: str, release_from: int | None = None
) -> bool:
    """Allocate disk blocks for ``[start, start + length)``.

    Returns False if the filesystem cannot reserve blocks (the caller then
    writes into holes); raises ``StorageFullError`` when there is no room. A
    failed reservation may have taken blocks before it failed (ext4 does): they
    are given back from ``release_from`` on, which the caller sets past every
    byte that holds data (default: nothing is given back).
    """
    if length <= 0:
        return True
    try:
        os.posix_fallocate(fd, start, length)
    except OSError as exc:
        if exc.errno in _UNSUPPORTED_ERRNOS:
            return False
        if exc.errno in _FULL_ERRNOS and release_from is not None:
            first, stop = max(start, release_from), start + length
            if stop > first:
                punch_hole(fd, first, stop - first)
        raise storage_error(exc, what) from exc
    return True


def punch_hole(fd: int, start: int, length: int) -> bool:
    """Deallocate ``[start, start + length)`` (reads then give zeros); True if done.

    Used to give back a failed reservation and to discard a failed append
    without needing new blocks, which a full disk does not have.
    """
    if _fallocate is None or length <= 0:
        return False
    rc = _fallocate(fd, _FALLOC_FL_PUNCH_HOLE | _FALLOC_FL_KEEP_SIZE, start, length)
    return rc == 0


def zero_range(fd: int, start: int, length: int, what: str) -> None:
    """Make ``[start, start + length)`` read as zeros without a mapped write.

    Punching a hole needs no free blocks; where that is unsupported, zeros are
    written with ``pwrite`` so a full disk raises instead of killing the process.
    """
    if length <= 0 or punch_hole(fd, start, length):
        return
    chunk = bytes(min(length, 1 << 20))
    pos, end = start, start + length
    while pos < end:
        n = min(len(chunk), end - pos)
        pwrite_all(fd, chunk[:n], pos, what)
        pos += n


def disk_usage(path: str | os.PathLike[str]) -> tuple[float, int, int]:
    """Return (used ratio, free bytes, total bytes) of the filesystem holding
    ``path`` now (used 0.0 when it reports no size); ``OSError`` if it
    cannot be read."""
    st = os.statvfs(path)
    total = st.f_blocks * st.f_frsize
    free = st.f_bavail * st.f_frsize
    used = 1.0 - (free / total) if total else 0.0
    return used, free, total


class DiskGuard:
    """Refuse appends while the store's filesystem is above a usage ratio.

    RocketMQ refuses writes above ``diskSpaceWarningLevelRatio`` (0.90); the
    check costs one ``statvfs`` every ``interval_s`` seconds, or sooner once the
    appends since the last look reach 0.1% of the filesystem (at least 64 KiB):
    on a small disk a burst could otherwise overshoot the ratio within one
    interval. A ratio of 1.0 or more turns the guard off (a truly full disk
    still fails cleanly).
    """

    def __init__(self, path: str | os.PathLike[str], ratio: float, interval_s: float):
        self.path = path
        self.ratio = ratio
        self.interval_s = interval_s
        self._checked = -interval_s
        self._used = 0.0
        #: Bytes appended since the last look, and how many may pass unlooked.
        self._pending = 0
        self._slack = 64 << 10
        self._lock = threading.Lock()

    def usage(self) -> tuple[float, int, int]:
        """Return (used ratio, free bytes, total bytes) of the filesystem now."""
        return disk_usage(self.path)

    def check(self, nbytes: int = 0) -> None:
        """Raise ``StorageFullError`` if the filesystem is above the ratio.

        ``nbytes`` is what the caller is about to append.
        """
        if self.ratio >= 1.0:
            return
        now = time.monotonic()
        self._pending += nbytes
        if now - self._checked >= self.interval_s or self._pending >= self._slack:
            with self._lock:
                used, _free, total = self.usage()
                self._used = used
                self._checked = now
                self._pending = 0
                self._slack = max(64 << 10, total // 1000)
        if self._used > self.ratio:
            raise StorageFullError(
                f"the store's disk is {self._used:.1%} full, above the limit of "
                f"{self.ratio:.0%} (disk_space_warning_ratio): appends are refused "
                "until space is freed; reads and consumption go on"
            )


#: A directory changed less than this long before it was listed may change
#: again within the same tick of its (coarse) modification time: such a
#: listing is not reused.
_LISTING_SETTLE_NS = 100_000_000


class DirListing:
    """``os.listdir`` of one directory, listed again only when the directory
    changed (its inode or modification time, one ``stat``), for directories
    looked at on every send or flush cycle (the index's files, the log's
    segments) that change once a file fills up, in any process. A listing
    taken within ``_LISTING_SETTLE_NS`` of the directory's last change is
    not trusted later: a file added in the same tick of the coarse clock
    leaves the modification time as it was."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = os.fspath(directory)
        self._key: tuple[int, int] | None = None
        self._names: list[str] = []
        self._lock = threading.Lock()

    def names(self) -> list[str]:
        """The directory's entries (unsorted; a shared list: do not change
        it); none if the directory does not exist."""
        try:
            st = os.stat(self.directory)
        except (FileNotFoundError, NotADirectoryError):
            return []
        key = (st.st_ino, st.st_mtime_ns)
        with self._lock:
            if key == self._key:
                return self._names
        names = os.listdir(self.directory)
        settled = time.time_ns() - st.st_mtime_ns > _LISTING_SETTLE_NS
        with self._lock:
            self._key, self._names = (key if settled else None), names
        return names
