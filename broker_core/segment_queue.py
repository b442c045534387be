"""A directory of equal-size segments addressed by one offset space
(RocketMQ ``MappedFileQueue``).

Segment ``k`` covers ``[k * size, (k + 1) * size)`` and is named by its base
offset, so any process can find the segment of an offset without a listing;
segments are mapped lazily on first access.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from broker_core.diskio import DirListing
from broker_core.segment import Segment, offset_to_name


class SegmentQueue:
    """The segments of one commit log or one consume queue."""

    def __init__(
        self, directory: Path, segment_size: int, readonly: bool = False
    ) -> None:
        self.directory = directory
        self._listing = DirListing(directory)
        self.segment_size = segment_size
        #: Map files for reading only and never create or extend them.
        self.readonly = readonly
        self._segments: dict[int, Segment] = {}
        self._lock = threading.Lock()

    def base_of(self, offset: int) -> int:
        """Return the base offset of the segment holding ``offset``."""
        return offset - offset % self.segment_size

    def list_bases(self) -> list[int]:
        """Return the base offsets of the segment files on disk, ascending."""
        out = []
        for name in self._listing.names():
            if len(name) == 20 and name.isdigit():
                out.append(int(name))
        return sorted(out)

    def segment(self, offset: int, create: bool = False) -> Segment | None:
        """Return the segment holding ``offset``; None if its file does not exist."""
        base = offset - offset % self.segment_size
        seg = self._segments.get(base)
        if seg is not None:
            return seg
        writes = create and not self.readonly
        name = offset_to_name(base)
        # A segment not there yet (every pass of the delay service looks at
        # each level's queue, most never written): one stat, no Path built.
        where = os.path.join(self._listing.directory, name)
        if not writes and not os.path.exists(where):
            return None
        with self._lock:
            seg = self._segments.get(base)
            if seg is not None:
                return seg
            path = self.directory / name
            if writes:
                self.directory.mkdir(parents=True, exist_ok=True)
            elif not path.exists():
                return None
            seg = Segment(
                path,
                base,
                self.segment_size,
                writes,
                self.readonly,
            )
            self._segments[base] = seg
            return seg

    def unlinked(self) -> list[int]:
        """Return the base offsets of the mapped segments whose files are gone
        from the directory (deleted under this process: ``Segment.unlinked``)."""
        with self._lock:
            return sorted(b for b, seg in self._segments.items() if seg.unlinked())

    def flush(self, start: int, end: int) -> None:
        """Flush every mapped segment that holds bytes of ``[start, end)``."""
        if end <= start:
            return
        base = self.base_of(start)
        while base < end:
            seg = self.segment(base)
            if seg is not None:
                seg.flush()
            base += self.segment_size

    def delete_from(self, offset: int) -> None:
        """Zero from ``offset`` to the end of its segment and delete later segments."""
        seg = self.segment(offset)
        if seg is not None:
            seg.zero(offset - seg.base)
        for base in self.list_bases():
            if base > self.base_of(offset):
                self._drop(base)

    def _drop(self, base: int) -> None:
        with self._lock:
            seg = self._segments.pop(base, None)
            if seg is not None:
                seg.close()
            try:
                os.unlink(self.directory / offset_to_name(base))
            except FileNotFoundError:
                pass

    def close(self) -> None:
        """Unmap every segment."""
        with self._lock:
            for seg in self._segments.values():
                seg.close()
            self._segments.clear()
