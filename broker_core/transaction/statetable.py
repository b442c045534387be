"""The transaction state table: one fixed-width entry per half, shared by processes.

It is the authority for "has this half an outcome?". Entries are indexed by the
half's queue offset in ``RMQ_SYS_TRANS_HALF_TOPIC`` (RocketMQ's
``tranStateTableOffset``) and live in mapped files of ``ENTRIES_PER_FILE``
entries, named by their 20-digit first queue offset, under
``STORE/transaction/state/``. Every write happens under the store's append lock,
right after the records it reflects, so a decision read under that lock sees
every record below ``applied_pos``; records above it are folded in first. The
table is derived data: a store whose log was cut below ``applied_pos`` is
rebuilt from the log.
"""

from __future__ import annotations

import mmap
import os
import struct
import zlib
from pathlib import Path

from broker_core.diskio import reserve
from broker_core.errors import StateTableDamagedError

# Entry: state u8 | check count u8 | source u8 | pad | CRC32 of the rest u32 |
#        commit message offset q | op offset q
ENTRY = struct.Struct("<BBBxIqq")
ENTRY_SIZE = ENTRY.size  # 24
#: What an entry's CRC covers: every field but itself.
_BODY = struct.Struct("<BBBqq")
ENTRIES_PER_FILE = 1 << 18
FILE_SIZE = ENTRY_SIZE * ENTRIES_PER_FILE  # 6 MiB

# Header file: magic q | applied_pos q | version q (native, aligned)
_HDR = struct.Struct("@qqq")
#: After the header: entries written so far (the highest queue offset + 1):
#: an all-zero entry below it was wiped, not never written.
_HIGH = struct.Struct("@q")
_HIGH_AT = _HDR.size
_MAGIC = 0x5452414E53544154  # "TRANSTAT"
#: 2: entries carry a CRC (a table of another version is folded again).
_VERSION = 2

NONE, PENDING, COMMITTED, ROLLED_BACK, DISCARDED = 0, 1, 2, 3, 4
SOURCE_NONE, SOURCE_CLIENT, SOURCE_CHECK, SOURCE_OPERATOR = 0, 1, 2, 3


def count_damaged(entries: bytes | memoryview) -> int:
    """How many of ``entries`` (written ones) fail their CRC or are zeros."""
    bad = 0
    for st, checks, src, crc, commit, op in ENTRY.iter_unpack(entries):
        if crc != zlib.crc32(_BODY.pack(st, checks, src, commit, op)) or not (
            st or crc
        ):
            bad += 1
    return bad


class StateTable:
    """Mapped entries ``(state, checks, source, commit_offset, op_offset)``."""

    def __init__(self, root: Path) -> None:
        self.dir = root / "transaction" / "state"
        self.dir.mkdir(parents=True, exist_ok=True)
        hfd = os.open(self.dir / "header", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            if os.fstat(hfd).st_size < 4096:
                os.ftruncate(hfd, 4096)
            # Blocks first: the table is written and read through mappings.
            reserve(hfd, 0, 4096, "reserving the transaction state header")
            self._hdr = mmap.mmap(hfd, 4096, mmap.MAP_SHARED)
        finally:
            os.close(hfd)
        self._files: dict[int, mmap.mmap] = {}
        if _HDR.unpack_from(self._hdr, 0)[0] != _MAGIC:
            _HDR.pack_into(self._hdr, 0, _MAGIC, 0, _VERSION)
            _HIGH.pack_into(self._hdr, _HIGH_AT, 0)

    @property
    def high(self) -> int:
        """Entries written so far: the highest queue offset set, plus one."""
        return int(_HIGH.unpack_from(self._hdr, _HIGH_AT)[0])

    @property
    def version(self) -> int:
        return int(_HDR.unpack_from(self._hdr, 0)[2])

    def rebuild_reason(self) -> str | None:
        """Why the table must be folded again from the log before use (it was
        written by another version, or an entry written fails its CRC or was
        wiped), or None. Call with the append lock held."""
        if self.version != _VERSION:
            return f"the state table has version {self.version}, not {_VERSION}"
        bad = self.damaged_entries()
        if bad:
            return f"{bad} state table entries fail their CRC or are missing"
        return None

    def damaged_entries(self) -> int:
        """How many of the entries written (below ``high``) fail their CRC or
        are gone (all zeros, or their file missing or cut short)."""
        high = self.high
        bad = 0
        for base in range(0, high, ENTRIES_PER_FILE):
            n = min(ENTRIES_PER_FILE, high - base)
            path = self.dir / f"{base:020d}"
            try:
                have = path.stat().st_size // ENTRY_SIZE
            except FileNotFoundError:
                bad += n
                continue
            if have < n:
                bad += n - have  # mapping it would fill the rest with zeros
                n = have
            mm = self._files.get(base) or self._file(base, create=False)
            if mm is None:
                bad += n
                continue
            bad += count_damaged(memoryview(mm)[: n * ENTRY_SIZE])
        return bad

    @property
    def applied_pos(self) -> int:
        """Log offset below which every record is reflected in the table."""
        return int(_HDR.unpack_from(self._hdr, 0)[1])

    @applied_pos.setter
    def applied_pos(self, value: int) -> None:
        struct.pack_into("@q", self._hdr, 8, value)

    def _file(self, base: int, create: bool) -> mmap.mmap | None:
        mm = self._files.get(base)
        if mm is not None:
            return mm
        path = self.dir / f"{base:020d}"
        if not create and not path.exists():
            return None
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            if os.fstat(fd).st_size < FILE_SIZE:
                os.ftruncate(fd, FILE_SIZE)
            reserve(fd, 0, FILE_SIZE, f"reserving transaction state {path.name}")
            mm = mmap.mmap(fd, FILE_SIZE, mmap.MAP_SHARED)
        finally:
            os.close(fd)
        self._files[base] = mm
        return mm

    def get(self, queue_offset: int) -> tuple[int, int, int, int, int]:
        """Return ``(state, checks, source, commit_offset, op_offset)`` (NONE)."""
        if queue_offset < 0:
            return (NONE, 0, 0, -1, -1)
        base = queue_offset - queue_offset % ENTRIES_PER_FILE
        mm = self._files.get(base) or self._file(base, create=False)
        if mm is None:
            return (NONE, 0, 0, -1, -1)
        st, checks, src, crc, commit, op = ENTRY.unpack_from(
            mm, (queue_offset - base) * ENTRY_SIZE
        )
        if crc != zlib.crc32(_BODY.pack(st, checks, src, commit, op)) and (
            st or checks or src or crc or commit or op
        ):
            raise StateTableDamagedError(
                f"transaction state entry {queue_offset} fails its CRC: reopen "
                "the transaction service (it folds the table again from the "
                "log) or run `verify --repair`"
            )
        return st, checks, src, commit, op

    def set(
        self,
        queue_offset: int,
        state: int,
        checks: int,
        source: int = SOURCE_NONE,
        commit_offset: int = -1,
        op_offset: int = -1,
    ) -> None:
        """Write one entry (the caller holds the store's append lock)."""
        base = queue_offset - queue_offset % ENTRIES_PER_FILE
        mm = self._files.get(base) or self._file(base, create=True)
        assert mm is not None
        checks = min(checks, 255)
        crc = zlib.crc32(_BODY.pack(state, checks, source, commit_offset, op_offset))
        if queue_offset >= self.high:
            _HIGH.pack_into(self._hdr, _HIGH_AT, queue_offset + 1)
        ENTRY.pack_into(
            mm,
            (queue_offset - base) * ENTRY_SIZE,
            state,
            checks,
            source,
            crc,
            commit_offset,
            op_offset,
        )

    def reset(self) -> None:
        """Forget everything (before a rebuild from the log; append lock held)."""
        for mm in self._files.values():
            mm.close()
        self._files.clear()
        for p in self.dir.iterdir():
            if p.name != "header":
                p.unlink()
        _HDR.pack_into(self._hdr, 0, _MAGIC, 0, _VERSION)
        _HIGH.pack_into(self._hdr, _HIGH_AT, 0)

    def flush(self) -> None:
        for mm in self._files.values():
            mm.flush()
        self._hdr.flush()

    def close(self) -> None:
        for mm in self._files.values():
            mm.close()
        self._files.clear()
        self._hdr.close()
