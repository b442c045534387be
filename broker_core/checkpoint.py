"""The checkpoint file and the abort marker (RocketMQ ``StoreCheckpoint``).

The checkpoint records how far each derived structure is known to be on disk,
so abnormal recovery re-dispatches only the log beyond those points.
"""

from __future__ import annotations

import logging
import os
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path

from broker_core.diskio import pwrite_all, reserve, storage_error
from broker_core.errors import StoreError

log = logging.getLogger(__name__)

CHECKPOINT_SIZE = 4096
# Big-endian longs; 0..32 as RocketMQ 5.x, 40.. this store's additions:
# 0 physicMsgTimestamp | 8 logicsMsgTimestamp | 16 indexMsgTimestamp
# 24 masterFlushedOffset (log flushed offset) | 32 confirmPhyOffset (same)
# 40 logicsOffset: consume queues flushed below this log offset
# 48 indexOffset: index files flushed below this log offset
# 56 CRC32 of bytes 0..56 (0 in files from before it was added: not checked)
CHECKPOINT = struct.Struct(">7q")
_CRC = struct.Struct(">I")


@dataclass(slots=True)
class Checkpoint:
    physic_timestamp: int = 0
    logics_timestamp: int = 0
    index_timestamp: int = 0
    flushed_offset: int = 0
    confirm_offset: int = 0
    logics_offset: int = 0
    index_offset: int = 0


def checkpoint_damage(path: Path) -> str | None:
    """Why the checkpoint at ``path`` cannot be used (short, failing its CRC,
    negative offsets); None if it is usable or absent (a new store)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    if len(data) < CHECKPOINT.size + _CRC.size:
        return f"short ({len(data)} bytes)"
    crc = _CRC.unpack_from(data, CHECKPOINT.size)[0]
    if crc and crc != zlib.crc32(data[: CHECKPOINT.size]):
        return "damaged (its CRC fails)"
    if min(CHECKPOINT.unpack_from(data, 0)[3:]) < 0:
        return "damaged (negative offsets)"
    return None


def read_checkpoint(path: Path) -> Checkpoint:
    """Return the checkpoint at ``path``.

    All zeros if it is missing, short or fails its CRC: recovery then verifies
    and re-dispatches the whole log, slower but never wrong.
    """
    why = checkpoint_damage(path)
    if why is not None:
        log.warning("checkpoint %s: %s: recovering from the whole log", path, why)
        return Checkpoint()
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return Checkpoint()
    return Checkpoint(*CHECKPOINT.unpack_from(data, 0))


def write_checkpoint(path: Path, cp: Checkpoint) -> None:
    """Write the checkpoint in place and fdatasync it (one 4 KiB block: no tearing)."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        buf = bytearray(CHECKPOINT_SIZE)
        CHECKPOINT.pack_into(
            buf,
            0,
            cp.physic_timestamp,
            cp.logics_timestamp,
            cp.index_timestamp,
            cp.flushed_offset,
            cp.confirm_offset,
            cp.logics_offset,
            cp.index_offset,
        )
        _CRC.pack_into(buf, CHECKPOINT.size, zlib.crc32(buf[: CHECKPOINT.size]))
        reserve(fd, 0, CHECKPOINT_SIZE, "reserving the checkpoint")
        pwrite_all(fd, bytes(buf), 0, "writing the checkpoint")
        os.fdatasync(fd)
    except OSError as exc:
        raise storage_error(exc, "writing the checkpoint") from exc
    finally:
        os.close(fd)


def create_abort(root: Path) -> bool:
    """Create ``{root}/abort`` holding this pid: "not shut down cleanly".

    Returns False (and logs) if the disk has no room even for the marker: the
    store still opens, and a crash in this session is then recovered as a
    normal stop (the tail is still verified), which beats refusing to start.
    """
    path = root / "abort"
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            pwrite_all(fd, str(os.getpid()).encode(), 0, "writing the abort marker")
        finally:
            os.close(fd)
        dfd = os.open(root, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except (OSError, StoreError) as exc:
        log.warning("abort marker not written (%s): the store opens without it", exc)
        return False
    return True


def abort_exists(root: Path) -> bool:
    return (root / "abort").exists()


def remove_abort(root: Path) -> None:
    try:
        (root / "abort").unlink()
    except FileNotFoundError:
        pass
