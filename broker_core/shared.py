"""State shared by every process that has a store open, and the locks they use.

``{root}/state`` is a 4 KiB file mapped by every process: the positions below
are read without a lock (aligned native 8-byte stores and loads do not tear on
the platforms this runs on) and written under the append lock. ``{root}/lock``
carries one shared ``flock`` per open store; the opener that can take it
exclusively knows it is alone and runs crash recovery.
"""

from __future__ import annotations

import fcntl
import mmap
import os
import struct
import threading
import weakref
from pathlib import Path
from types import TracebackType

from broker_core.diskio import reserve
from broker_core.errors import StoreError

STATE_SIZE = 4096
STATE_MAGIC = 0x524D5153544F5245  # "RMQSTORE"
# Native, 8-byte aligned fields (``@q``: one aligned machine store each):
# 0 magic | 8 commit_pos: end of the last complete record
# 16 dispatched_pos: consume queues hold units for every record below it
# 24 flushed_pos: the log is on disk below it | 32 indexed_pos: index built below it
# 40 topics_version | 48 offsets_version: bumped when the JSON files change
# 56 trusted_from: the log end when this run's recovery finished; records at or
#    past it were appended by live processes (see ``trusted_from``)
# 64 replica: 1 while the store follows a master (``ha``): client appends refused
# 72 lease_until: with a controller, the CLOCK_MONOTONIC ns until which the
#    master's lease lets it append (0: no controller; past: appends refused)
_Q = struct.Struct("@q")
_MAGIC_AT, _COMMIT_AT, _DISPATCHED_AT, _FLUSHED_AT, _INDEXED_AT = 0, 8, 16, 24, 32
_TOPICS_V_AT, _OFFSETS_V_AT, _TRUSTED_AT, _REPLICA_AT = 40, 48, 56, 64
_LEASE_AT = 72
# Public names for the store's append path, which reads and writes ``mm`` directly.
COMMIT_AT, DISPATCHED_AT, TOPICS_V_AT = _COMMIT_AT, _DISPATCHED_AT, _TOPICS_V_AT
REPLICA_AT, LEASE_AT = _REPLICA_AT, _LEASE_AT


def read_commit_pos(root: Path) -> int:
    """Return the commit position in ``{root}/state`` without opening the store
    (0 if the file is missing or not initialised): for read-only tools."""
    try:
        with open(root / "state", "rb") as fh:
            raw = fh.read(_OFFSETS_V_AT)
    except OSError:
        return 0
    if len(raw) < _OFFSETS_V_AT or _Q.unpack_from(raw, _MAGIC_AT)[0] != STATE_MAGIC:
        return 0
    return int(_Q.unpack_from(raw, _COMMIT_AT)[0])


def state_damage(root: Path, log_end: int) -> str | None:
    """Why ``{root}/state`` of a store shut down cleanly disagrees with its
    log (``log_end``: where the log's records end); None if it agrees or is
    absent. Only meaningful with no process running: the positions move."""
    try:
        with open(root / "state", "rb") as fh:
            raw = fh.read(_LEASE_AT)
    except FileNotFoundError:
        return None
    if len(raw) < _LEASE_AT:
        return f"short ({len(raw)} bytes)"
    if _Q.unpack_from(raw, _MAGIC_AT)[0] != STATE_MAGIC:
        return "not a state file (its magic number is wrong)"
    commit = _Q.unpack_from(raw, _COMMIT_AT)[0]
    if commit != log_end:
        return f"says the log ends at {commit}; its records end at {log_end}"
    for name, at in (
        ("dispatched", _DISPATCHED_AT),
        ("flushed", _FLUSHED_AT),
        ("indexed", _INDEXED_AT),
    ):
        pos = _Q.unpack_from(raw, at)[0]
        if not 0 <= pos <= commit:
            return f"its {name} position {pos} lies outside the log [0, {commit}]"
    return None


#: Every open ``FileLock``, marked in a forked child (``_after_fork``).
_LOCKS: weakref.WeakSet[FileLock] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for lock in list(_LOCKS):
        lock.forked = True


os.register_at_fork(after_in_child=_after_fork_in_child)


class FileLock:
    """An exclusive ``flock`` that also serialises the threads of this process.

    A ``flock`` belongs to the open file, which a forked child shares with its
    parent: the child's "acquire" would succeed while the parent holds the
    lock. So a lock inherited through ``fork`` refuses to be used (the child
    must open the store itself).
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        self._thread_lock = threading.RLock()
        self._depth = 0
        #: Set in a forked child: this lock is the parent's.
        self.forked = False
        _LOCKS.add(self)

    def acquire(self, blocking: bool = True) -> bool:
        """Take the lock; with ``blocking=False`` return False at once if this
        or another process holds it (nothing is held then)."""
        if self.forked:
            raise StoreError(
                f"{self.path} was opened by the parent of this forked process; "
                "open the store again in this process"
            )
        if not self._thread_lock.acquire(blocking):
            return False
        if self._depth == 0:
            try:
                mode = fcntl.LOCK_EX if blocking else fcntl.LOCK_EX | fcntl.LOCK_NB
                fcntl.flock(self._fd, mode)
            except BlockingIOError:
                self._thread_lock.release()
                return False
            except BaseException:
                self._thread_lock.release()
                raise
        self._depth += 1
        return True

    def release(self) -> None:
        self._depth -= 1
        if self._depth == 0:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
        self._thread_lock.release()

    def __enter__(self) -> FileLock:
        self.acquire()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()

    def close(self) -> None:
        _LOCKS.discard(self)
        os.close(self._fd)


class SharedState:
    """The mapped ``state`` file plus the append and presence locks."""

    def __init__(self, root: Path) -> None:
        self.root = root
        path = root / "state"
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            if os.fstat(fd).st_size < STATE_SIZE:
                os.ftruncate(fd, STATE_SIZE)
            # Blocks first: positions are written through the mapping.
            reserve(fd, 0, STATE_SIZE, "reserving the store's state file")
            self._mm = mmap.mmap(fd, STATE_SIZE, mmap.MAP_SHARED)
        finally:
            os.close(fd)
        #: The mapping itself, for hot paths that skip the properties below.
        self.mm = self._mm
        #: Serialises appends, topic changes and opening (recovery) across processes.
        self.append_lock = FileLock(path)
        #: Serialises index building, which runs beside appends.
        self.index_lock = FileLock(root / "index.lock")
        #: Serialises log fsyncs across processes: a process that waited for
        #: another's fsync usually finds its own bytes already flushed.
        self.flush_lock = FileLock(root / "flush.lock")
        #: Serialises read-modify-write of consumer offsets.
        self.offsets_lock = FileLock(root / "offsets.lock")
        self._presence_fd = os.open(root / "lock", os.O_RDWR | os.O_CREAT, 0o644)

    # -- presence ------------------------------------------------------------
    def try_exclusive_presence(self) -> bool:
        """Return True if no other process has the store open (under append_lock)."""
        try:
            fcntl.flock(self._presence_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        return True

    def share_presence(self) -> None:
        """Hold a shared presence lock for the life of this open store."""
        fcntl.flock(self._presence_fd, fcntl.LOCK_SH)

    # -- positions -----------------------------------------------------------
    def _get(self, at: int) -> int:
        return int(_Q.unpack_from(self._mm, at)[0])

    def _set(self, at: int, value: int) -> None:
        _Q.pack_into(self._mm, at, value)

    @property
    def initialised(self) -> bool:
        return self._get(_MAGIC_AT) == STATE_MAGIC

    def reset(self, commit_pos: int, flushed_pos: int, indexed_pos: int) -> None:
        """Set every position after recovery (only the sole opener calls this)."""
        self._set(_COMMIT_AT, commit_pos)
        self._set(_DISPATCHED_AT, commit_pos)
        self._set(_FLUSHED_AT, min(flushed_pos, commit_pos))
        self._set(_INDEXED_AT, min(indexed_pos, commit_pos))
        self._set(_TRUSTED_AT, commit_pos)
        self._set(_MAGIC_AT, STATE_MAGIC)

    @property
    def trusted_from(self) -> int:
        """Where records appended in this run begin (set by recovery).

        Below it the log came from disk when the store was opened: every read
        checks those records' CRCs. At or past it every record was appended by
        a process of this run, whole and CRC'd as it was built, and is read from
        the page cache without the check (the scrubber re-checks them).
        """
        return int(_Q.unpack_from(self._mm, _TRUSTED_AT)[0])

    @property
    def replica(self) -> bool:
        """Whether the store follows a master: only replicated bytes are appended.

        Set by the HA follower, cleared by a promotion; every process that has
        the store open sees it on its next append.
        """
        return bool(self._get(_REPLICA_AT))

    @replica.setter
    def replica(self, value: bool) -> None:
        self._set(_REPLICA_AT, int(value))

    @property
    def lease_until_ns(self) -> int:
        """With a controller (``cluster.controller``): until when (CLOCK_MONOTONIC
        ns, the same clock in every process) the master's lease lets the store
        take appends; 0 without a controller."""
        return self._get(_LEASE_AT)

    @lease_until_ns.setter
    def lease_until_ns(self, value: int) -> None:
        self._set(_LEASE_AT, int(value))

    @property
    def commit_pos(self) -> int:
        return int(_Q.unpack_from(self._mm, _COMMIT_AT)[0])

    @commit_pos.setter
    def commit_pos(self, value: int) -> None:
        _Q.pack_into(self._mm, _COMMIT_AT, value)

    @property
    def dispatched_pos(self) -> int:
        return int(_Q.unpack_from(self._mm, _DISPATCHED_AT)[0])

    @dispatched_pos.setter
    def dispatched_pos(self, value: int) -> None:
        _Q.pack_into(self._mm, _DISPATCHED_AT, value)

    @property
    def flushed_pos(self) -> int:
        return self._get(_FLUSHED_AT)

    def advance_flushed(self, value: int) -> None:
        """Raise ``flushed_pos`` to ``value`` (a lost race only lowers it: safe)."""
        if value > self._get(_FLUSHED_AT):
            self._set(_FLUSHED_AT, value)

    @property
    def indexed_pos(self) -> int:
        return self._get(_INDEXED_AT)

    @indexed_pos.setter
    def indexed_pos(self, value: int) -> None:
        self._set(_INDEXED_AT, value)

    @property
    def topics_version(self) -> int:
        return self._get(_TOPICS_V_AT)

    def bump_topics_version(self) -> int:
        v = self._get(_TOPICS_V_AT) + 1
        self._set(_TOPICS_V_AT, v)
        return v

    @property
    def offsets_version(self) -> int:
        return self._get(_OFFSETS_V_AT)

    def bump_offsets_version(self) -> int:
        v = self._get(_OFFSETS_V_AT) + 1
        self._set(_OFFSETS_V_AT, v)
        return v

    @property
    def forked(self) -> bool:
        """True in a forked child of the process that opened the store."""
        return self.append_lock.forked

    def close(self) -> None:
        """Release the presence lock and unmap.

        In a forked child only the descriptors are closed: the presence lock
        belongs to the open file shared with the parent, which still has the
        store open.
        """
        try:
            if not self.forked:
                fcntl.flock(self._presence_fd, fcntl.LOCK_UN)
        finally:
            os.close(self._presence_fd)
        self.append_lock.close()
        self.index_lock.close()
        self.flush_lock.close()
        self.offsets_lock.close()
        try:
            self._mm.close()
        except BufferError as exc:  # pragma: no cover - defensive
            raise StoreError("state mapping still in use") from exc
