"""The message index: hash files keyed by ``topic#key`` (RocketMQ ``IndexFile``).

Keys indexed per record: its ``UNIQ_KEY`` and each space-separated ``KEYS``
token. A file is a 40-byte header, ``slots`` 4-byte hash slots and ``entries``
20-byte entries chained newest first. Files are named by their creation time
(``yyyyMMddHHmmssSSS``); the newest is the one written to. All state lives in
the mapped files, so any process can build (under the index lock) or query.
"""

from __future__ import annotations

import mmap
import os
import struct
import time
from collections.abc import Iterable
from pathlib import Path

from broker_core.diskio import DirListing, reserve, storage_error
from broker_core.errors import StorageFullError
from broker_core.tags import java_string_hash

# beginTimestamp q | endTimestamp q | beginPhyOffset q | endPhyOffset q
# hashSlotCount i | indexCount i   (indexCount starts at 1: entry 0 is unused)
HEADER = struct.Struct(">qqqqii")
HEADER_SIZE = HEADER.size  # 40
SLOT = struct.Struct(">i")
# keyHash i | phyOffset q | timeDiff i (seconds since beginTimestamp) | prevIndex i
ENTRY = struct.Struct(">iqii")
ENTRY_SIZE = ENTRY.size  # 20
#: the unit in which slots get disk blocks
PAGE = 4096


def key_hash(key: str) -> int:
    """Return ``abs(key.hashCode())``, with ``Integer.MIN_VALUE`` mapped to 0."""
    h = java_string_hash(key)
    return 0 if h == -0x80000000 else abs(h)


def _utf16_len(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode("utf-16-le")) // 2


class KeyHasher:
    """``key_hash(topic + "#" + key)`` without hashing the whole string each time.

    Java's hash of a concatenation is ``h(a) * 31**len(b) + h(b)`` (mod 2**32),
    so the ``topic#`` prefix is hashed once per topic, and a key seen lately
    (a committed message repeats its half's ``UNIQ_KEY``) is not hashed again.
    """

    __slots__ = ("_prefix", "_keys", "_pow")

    def __init__(self) -> None:
        self._prefix: dict[str, int] = {}
        self._keys: dict[str, tuple[int, int]] = {}
        self._pow: list[int] = [1]

    def __call__(self, topic: str, key: str) -> int:
        p = self._prefix.get(topic)
        if p is None:
            if len(self._prefix) > 4096:
                self._prefix.clear()
            p = self._prefix[topic] = java_string_hash(topic + "#") & 0xFFFFFFFF
        k = self._keys.get(key)
        if k is None:
            if len(self._keys) > 16384:
                self._keys.clear()
            k = self._keys[key] = (
                java_string_hash(key) & 0xFFFFFFFF,
                _utf16_len(key),
            )
        pw = self._pow
        while len(pw) <= k[1]:
            pw.append(pw[-1] * 31 & 0xFFFFFFFF)
        h = (p * pw[k[1]] + k[0]) & 0xFFFFFFFF
        if h & 0x80000000:
            h = 0x100000000 - h  # abs() of the negative int32
        return 0 if h == 0x80000000 else h


class IndexFile:
    """One mapped index file."""

    def __init__(
        self, path: Path, slots: int, entries: int, readonly: bool = False
    ) -> None:
        self.path = path
        self.slots = slots
        self.entries = entries
        self.size = size = HEADER_SIZE + slots * SLOT.size + entries * ENTRY_SIZE
        self.readonly = readonly
        if readonly:
            # ``verify``: mapped as it is, never extended or changed; a file
            # shorter than its geometry is read as far as it goes.
            fd = os.open(path, os.O_RDONLY)
            try:
                have = os.fstat(fd).st_size
                self._fd = os.dup(fd)
                self.mm = mmap.mmap(fd, have, access=mmap.ACCESS_READ) if have else b""
                self.short = have < size
            finally:
                os.close(fd)
            return
        self.short = False
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            if os.fstat(fd).st_size < size:
                os.ftruncate(fd, size)
            self._fd = os.dup(fd)
            self.mm = mmap.mmap(fd, size, mmap.MAP_SHARED)
        finally:
            os.close(fd)
        #: Disk blocks are taken as the file is used, so that a full disk
        #: raises instead of SIGBUS and a small store takes little room: the
        #: header page at once, a page of slots when a key first hashes into
        #: it (``_slot_pages``), entries as they are added (``_entries_end``).
        #: (It took the 20 MB of 5M slots up front: on a disk with less room
        #: nothing was indexed, and a restart refused sends meanwhile.)
        self._entries_at = HEADER_SIZE + slots * SLOT.size
        self._entries_end = self._entries_at
        self._slot_pages = bytearray((self._entries_at + PAGE - 1) // PAGE)
        self._can_reserve = True
        try:
            self._reserve_slot_page(0)
        except StorageFullError:
            self.close()
            raise

    def _reserve_slot_page(self, page: int) -> None:
        if self._slot_pages[page] or not self._can_reserve:
            return
        what = f"reserving index file {self.path.name}"
        if not reserve(self._fd, page * PAGE, PAGE, what):
            self._can_reserve = False  # cannot reserve: writes go into holes
        self._slot_pages[page] = 1

    def _reserve_entries(self, end: int) -> None:
        if end > self._entries_end and self._can_reserve:
            end = min(self.size, end + (1 << 20))
            what = f"reserving index file {self.path.name}"
            start = self._entries_end
            if not reserve(self._fd, start, end - start, what):
                self._can_reserve = False
            self._entries_end = end

    def _slot(self, slot_at: int) -> int:
        """A slot read with ``pread``, not through the mapping: a page of
        slots never written is a hole, and a mapped read of a hole on a full
        tmpfs is a SIGBUS (``diskio.hole_reads_can_fault``)."""
        raw = os.pread(self._fd, 4, slot_at)
        return SLOT.unpack(raw)[0] if len(raw) == 4 else 0

    def header(self) -> tuple[int, int, int, int, int, int]:
        return HEADER.unpack_from(self.mm, 0)  # type: ignore[return-value]

    def is_full(self) -> bool:
        count = self.header()[5]
        return count >= self.entries

    def put(self, key: str, phy_offset: int, store_ts: int) -> bool:
        """Add one key; return False when the file is full."""
        return self.put_hash(key_hash(key), phy_offset, store_ts)

    def put_hash(self, h: int, phy_offset: int, store_ts: int) -> bool:
        """Add one key by its ``key_hash``; return False when the file is full."""
        return self.put_hashes([(h, phy_offset, store_ts)], 0) == 1

    def put_hashes(self, items: list[tuple[int, int, int]], start: int) -> int:
        """Add ``items[start:]`` (``(key_hash, phy_offset, store_ts)``) until the
        file is full; return the index of the first item not added.

        Entries are written first, then the header's count, then the slots, so
        a reader in another process always follows complete chains: new keys
        appear when their slot is written, old ones never disappear.
        """
        mm = self.mm
        begin_ts, end_ts, begin_off, end_off, slot_count, count = HEADER.unpack_from(
            mm, 0
        )
        if count == 0:
            count = 1
        slots = self.slots
        entries_at = HEADER_SIZE + slots * 4
        self._reserve_entries(
            entries_at + min(self.entries, count + len(items) - start) * ENTRY_SIZE
        )
        slot_unpack, entry_pack = SLOT.unpack_from, ENTRY.pack_into
        pages = self._slot_pages
        pending: dict[int, int] = {}
        i = start
        n = len(items)
        while i < n and count < self.entries:
            h, phy, ts = items[i]
            slot_at = HEADER_SIZE + (h % slots) * 4
            prev = pending.get(slot_at)
            if prev is None:
                page = slot_at // PAGE
                if not pages[page]:
                    self._reserve_slot_page(page)
                prev = slot_unpack(mm, slot_at)[0]
                if prev <= 0 or prev > count:
                    prev = 0
                    slot_count += 1
            if begin_ts <= 0:
                begin_ts, begin_off = ts, phy
            diff = (ts - begin_ts) // 1000
            if diff < 0:
                diff = 0
            elif diff > 0x7FFFFFFF:
                diff = 0x7FFFFFFF
            entry_pack(mm, entries_at + count * ENTRY_SIZE, h, phy, diff, prev)
            pending[slot_at] = count
            if ts > end_ts:
                end_ts = ts
            if phy > end_off:
                end_off = phy
            count += 1
            i += 1
        if i > start:
            HEADER.pack_into(
                mm, 0, begin_ts, end_ts, begin_off, end_off, slot_count, count
            )
            slot_pack = SLOT.pack_into
            for slot_at, idx in pending.items():
                slot_pack(mm, slot_at, idx)
        return i

    def query(self, key: str, begin: int, end: int, limit: int) -> list[int]:
        """Return physical offsets of entries for ``key`` within ``[begin, end]`` ms."""
        if len(self.mm) < HEADER_SIZE + self.slots * SLOT.size:
            return []  # a read-only mapping of a file cut short
        begin_ts, end_ts, _, _, _, count = HEADER.unpack_from(self.mm, 0)
        count = min(
            count,
            self.entries,
            (len(self.mm) - HEADER_SIZE - self.slots * 4) // ENTRY_SIZE,
        )
        # The header's times skip a file outside the query's window, and date
        # its entries; a damaged header (one flipped bit made every lookup
        # miss) is not trusted: every entry of the key is returned, and the
        # caller checks each record it reads.
        sane = 0 < begin_ts <= end_ts
        if count <= 1 or (sane and (end_ts + 1000 < begin or begin_ts > end)):
            return []
        h = key_hash(key)
        idx = self._slot(HEADER_SIZE + (h % self.slots) * 4)
        out: list[int] = []
        seen = 0
        base = HEADER_SIZE + self.slots * 4
        while 0 < idx < count and len(out) < limit and seen < count:
            eh, off, diff, prev = ENTRY.unpack_from(self.mm, base + idx * ENTRY_SIZE)
            t = begin_ts + diff * 1000 if sane else None
            # Entry times are truncated to seconds: allow a second of slack.
            if t is not None and t + 1000 < begin:
                break
            if eh == h and (t is None or t <= end):
                out.append(off)
            if prev == idx:
                break
            idx = prev
            seen += 1
        return out

    def flush(self) -> None:
        try:
            os.fdatasync(self._fd)
        except OSError as exc:
            raise storage_error(exc, f"flushing {self.path.name}") from exc

    def close(self) -> None:
        try:
            if isinstance(self.mm, mmap.mmap):
                self.mm.close()
        except BufferError:  # pragma: no cover - defensive
            pass
        os.close(self._fd)


def _has_data(path: Path) -> bool:
    """Whether ``path`` holds any data (not only holes); False if it is gone."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        os.lseek(fd, 0, os.SEEK_DATA)
        return True
    except OSError:  # ENXIO: no data past 0
        return False
    finally:
        os.close(fd)


def _file_name(ts_ms: int) -> str:
    lt = time.localtime(ts_ms / 1000)
    return time.strftime("%Y%m%d%H%M%S", lt) + f"{ts_ms % 1000:03d}"


class IndexService:
    """The index files of a store."""

    def __init__(self, root: Path, slots: int, entries: int) -> None:
        self.directory = root / "index"
        self._listing = DirListing(self.directory)
        self.slots = slots
        self.entries = entries
        self.files: dict[str, IndexFile] = {}
        self._hasher = KeyHasher()

    def _names(self) -> list[str]:
        return sorted(n for n in self._listing.names() if n.isdigit())

    def _open(self, name: str) -> IndexFile:
        """Map one index file; ``StorageFullError`` if its blocks cannot be had.

        A file left with no data at all (created just before a full disk
        refused its blocks) is removed then: it indexes nothing.
        """
        f = self.files.get(name)
        if f is None:
            path = self.directory / name
            try:
                f = IndexFile(path, self.slots, self.entries)
            except StorageFullError:
                if not _has_data(path):
                    path.unlink(missing_ok=True)
                raise
            self.files[name] = f
        return f

    def _writable(self, now_ms: int) -> IndexFile:
        names = self._names()
        if names:
            last = self._open(names[-1])
            if not last.is_full():
                return last
        self.directory.mkdir(parents=True, exist_ok=True)
        name = _file_name(now_ms)
        while names and name <= names[-1]:
            now_ms += 1
            name = _file_name(now_ms)
        return self._open(name)

    def build(self, items: Iterable[tuple[int, int, str, list[str]]]) -> int:
        """Index ``(phy_offset, store_ts, topic, keys)`` items (as ``topic#key``).

        Call under the index lock. Returns the number of keys added.
        """
        hasher = self._hasher
        hashed = [
            (hasher(topic, key), phy, ts)
            for phy, ts, topic, keys in items
            for key in keys
        ]
        i = 0
        while i < len(hashed):
            i = self._writable(hashed[i][2]).put_hashes(hashed, i)
        return len(hashed)

    def query(self, key: str, begin: int, end: int, limit: int) -> list[int]:
        """Return physical offsets for ``key`` (``topic#key``), newest files first."""
        out: list[int] = []
        for name in reversed(self._names()):
            try:
                f = self._open(name)
            except StorageFullError:
                continue  # a file a full disk left without blocks: nothing in it
            out.extend(f.query(key, begin, end, limit - len(out)))
            if len(out) >= limit:
                break
        return out

    def has_files(self) -> bool:
        """Whether any index file exists."""
        return bool(self._names())

    def truncate_beyond(self, log_end: int) -> None:
        """Delete index files that begin at or past ``log_end`` (log was cut)."""
        for name in self._names():
            try:
                f = self._open(name)
            except StorageFullError:
                continue  # see ``_open``: no blocks, so nothing past the end
            begin_ts, _, begin_off, _, _, count = f.header()
            if count > 1 and begin_off >= log_end:
                f.close()
                del self.files[name]
                os.unlink(self.directory / name)

    def flush(self) -> None:
        for f in list(self.files.values()):
            f.flush()

    def close(self) -> None:
        for f in self.files.values():
            f.close()
        self.files.clear()
