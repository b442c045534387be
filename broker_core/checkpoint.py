"""The checkpoint file and the abort marker (RocketMQ ``StoreCheckpoint``, §3.4).

The checkpoint records how far each derived structure is known to be on disk,
so abnormal recovery re-dispatches only the log beyond those points.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path

CHECKPOINT_SIZE = 4096
# Big-endian longs; 0..32 as RocketMQ 5.x, 40.. this store's additions:
# 0 physicMsgTimestamp | 8 logicsMsgTimestamp | 16 indexMsgTimestamp
# 24 masterFlushedOffset (log flushed offset) | 32 confirmPhyOffset (same)
# 40 logicsOffset: consume queues flushed below this log offset
# 48 indexOffset: index files flushed below this log offset
CHECKPOINT = struct.Struct(">7q")


@dataclass(slots=True)
class Checkpoint:
    physic_timestamp: int = 0
    logics_timestamp: int = 0
    index_timestamp: int = 0
    flushed_offset: int = 0
    confirm_offset: int = 0
    logics_offset: int = 0
    index_offset: int = 0

    @property
    def min_timestamp(self) -> int:
        """RocketMQ's ``getMinTimestamp``: the older of log and queues, minus 3 s."""
        return max(0, min(self.physic_timestamp, self.logics_timestamp) - 3000)


def read_checkpoint(path: Path) -> Checkpoint:
    """Return the checkpoint at ``path`` (all zeros if missing or short)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return Checkpoint()
    if len(data) < CHECKPOINT.size:
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
        os.pwrite(fd, bytes(buf), 0)
        os.fdatasync(fd)
    finally:
        os.close(fd)


def create_abort(root: Path) -> None:
    """Create ``{root}/abort`` holding this pid: "not shut down cleanly"."""
    path = root / "abort"
    path.write_text(str(os.getpid()))
    fd = os.open(root, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def abort_exists(root: Path) -> bool:
    return (root / "abort").exists()


def remove_abort(root: Path) -> None:
    try:
        (root / "abort").unlink()
    except FileNotFoundError:
        pass
