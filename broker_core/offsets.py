"""Committed consumer offsets, kept in memory and persisted on a timer
(RocketMQ ``ConsumerOffsetManager``).

A commit updates memory only; the store's flusher writes the changed entries
to ``config/consumerOffset.json`` every ``offset_persist_interval_ms`` (and at
close). Several processes may commit: each writes only the entries it changed,
merged into the file under the offsets lock, and reloads the others' when the
shared version counter moves. A crash (SIGKILL, power loss) can lose the
commits of the last interval: those messages are delivered again, which
at-least-once consumers already handle.
"""

from __future__ import annotations

import threading

from broker_core.metadata import OffsetTable
from broker_core.shared import SharedState


class ConsumerOffsets:
    """The offsets of one open store, as this process sees and changes them."""

    def __init__(self, table: OffsetTable, state: SharedState) -> None:
        self.table = table
        self.state = state
        self._version = -1
        #: Entries committed here and not yet written: (topic@group, queue) -> offset.
        self._dirty: dict[tuple[str, int], int] = {}
        self._lock = threading.Lock()

    def _reload(self) -> None:
        v = self.state.offsets_version
        if v != self._version:
            self.table.load()
            self._version = v
            # What this process committed and has not written yet still holds.
            for (key, qid), off in self._dirty.items():
                self.table.offsets.setdefault(key, {})[qid] = off

    def commit(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """Record ``offset`` (the next to consume) in memory."""
        key = f"{topic}@{group}"
        with self._lock:
            self._dirty[(key, queue_id)] = offset
            self.table.offsets.setdefault(key, {})[queue_id] = offset

    def get(self, group: str, topic: str, queue_id: int) -> int:
        """Return the committed offset, or -1 if none."""
        with self._lock:
            self._reload()
            return self.table.get(group, topic, queue_id)

    def all(self) -> dict[str, dict[int, int]]:
        """Return every committed offset: ``{"topic@group": {queue_id: offset}}``."""
        with self._lock:
            self._reload()
            return {k: dict(v) for k, v in self.table.offsets.items()}

    def persist(self) -> bool:
        """Write the entries changed here since the last call; True if any."""
        with self._lock:
            if not self._dirty:
                return False
            dirty = dict(self._dirty)
        with self.state.offsets_lock:
            with self._lock:
                self._version = -2  # force a reload under the lock
                self._reload()
                self.table.persist()
                self._version = self.state.bump_offsets_version()
                for k, v in dirty.items():
                    if self._dirty.get(k) == v:
                        del self._dirty[k]
        return True

    def drop_topic(self, topic: str) -> None:
        """Forget every group's offsets on ``topic`` and write the file now."""
        with self.state.offsets_lock:
            with self._lock:
                self._dirty = {
                    k: v
                    for k, v in self._dirty.items()
                    if k[0].split("@", 1)[0] != topic
                }
                self._version = -2
                self._reload()
                self.table.drop_topic(topic)
                self.table.persist()
                self._version = self.state.bump_offsets_version()
