"""Damaged log ranges, kept aside: ``{root}/quarantine/``.

Recovery, ``verify --repair`` and the scrubber copy every byte range of the
commit log that holds no valid record into ``quarantine/{offset}.bin`` and
describe it in ``quarantine/ranges.jsonl`` (offset, length, reason, when,
which segment), before the log is touched. Nothing is lost silently: the
operator sees exactly what was damaged, and the bytes stay for forensics.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from broker_core.diskio import pwrite_all, storage_error

#: At most this many bytes of one damaged range are copied (a torn tail of a
#: huge segment is described, not duplicated whole).
MAX_COPY = 64 << 20


@dataclass(frozen=True, slots=True)
class QuarantinedRange:
    """One damaged range of the log: ``[offset, offset + length)``."""

    offset: int
    length: int
    reason: str
    found_at_ms: int
    segment: str
    copied: int
    action: str

    @property
    def end(self) -> int:
        return self.offset + self.length


class Quarantine:
    """The quarantined ranges of one store."""

    def __init__(self, root: Path) -> None:
        self.directory = root / "quarantine"
        self.ranges: list[QuarantinedRange] = []
        self.load()

    def load(self) -> None:
        """Read ``ranges.jsonl``; a torn last line (a crash while adding) is ignored."""
        path = self.directory / "ranges.jsonl"
        out: list[QuarantinedRange] = []
        try:
            text = path.read_text()
        except FileNotFoundError:
            text = ""
        for line in text.splitlines():
            try:
                out.append(QuarantinedRange(**json.loads(line)))
            except (ValueError, TypeError):
                continue
        self.ranges = sorted(out, key=lambda r: r.offset)

    def known(self, offset: int) -> bool:
        return any(r.offset == offset for r in self.ranges)

    def add(
        self, offset: int, data: bytes, length: int, reason: str, segment: str,
        action: str,
    ) -> QuarantinedRange:  # fmt: skip
        """Keep ``data`` (the range's bytes, maybe cut at ``MAX_COPY``) and describe it.

        The copy is fsynced before the description, and both before the caller
        changes the log. Raises ``StorageFullError`` / ``StorageIOError``.
        """
        self.directory.mkdir(exist_ok=True)
        entry = QuarantinedRange(
            offset, length, reason, int(time.time() * 1000), segment,
            min(len(data), MAX_COPY), action,
        )  # fmt: skip
        what = "writing to quarantine/"
        fd = os.open(
            self.directory / f"{offset:020d}.bin",
            os.O_WRONLY | os.O_CREAT | os.O_TRUNC,
            0o644,
        )
        try:
            pwrite_all(fd, data[:MAX_COPY], 0, what)
            os.fsync(fd)
        except OSError as exc:
            raise storage_error(exc, what) from exc
        finally:
            os.close(fd)
        line = (json.dumps(asdict(entry), sort_keys=True) + "\n").encode()
        fd = os.open(
            self.directory / "ranges.jsonl", os.O_WRONLY | os.O_CREAT | os.O_APPEND,
            0o644,
        )  # fmt: skip
        try:
            os.write(fd, line)
            os.fsync(fd)
        except OSError as exc:
            raise storage_error(exc, what) from exc
        finally:
            os.close(fd)
        self.ranges = sorted([*self.ranges, entry], key=lambda r: r.offset)
        return entry
