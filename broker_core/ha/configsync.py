"""Config sync from master to slave (RocketMQ ``SlaveSynchronize``).

Besides the log a slave needs the master's consumer offsets, topic configs
(queue counts included) and delay progress. The master sends a file whenever
it changed (looked at every second), over the HA connection; the slave writes
it atomically and makes its open store see it: topics through the topic
registry (shared version bump), offsets through the offsets version. The delay
progress is held back until the slave's log reaches its ``logPos``: a progress
that counts deliveries whose copies the slave does not have would lose them
after a promotion (the file is a cache of the log, replayed from ``logPos``).
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from broker_core.errors import ReplicationError
from broker_core.metadata import TopicConfig, atomic_write_json
from broker_core.schedule.progress import PROGRESS_FILE

if TYPE_CHECKING:
    from broker_core.store import MessageStore

log = logging.getLogger(__name__)

TOPICS = "topics.json"
OFFSETS = "consumerOffset.json"
#: The files synced, all under ``config/``.
SYNCED = (TOPICS, OFFSETS, PROGRESS_FILE)


class ConfigWatcher:
    """The master's side: which synced files changed since last sent."""

    def __init__(self, root: Path) -> None:
        self.dir = root / "config"
        self._seen: dict[str, tuple[int, int, int]] = {}

    def changed(self) -> list[tuple[str, dict[str, Any]]]:
        """Return ``(name, content)`` of each synced file changed since last asked."""
        out = []
        for name in SYNCED:
            path = self.dir / name
            try:
                st = os.stat(path)
                sig = (st.st_ino, st.st_mtime_ns, st.st_size)
                if self._seen.get(name) == sig:
                    continue
                obj = json.loads(path.read_bytes())
            except FileNotFoundError:
                continue
            except ValueError:
                continue  # written by something other than atomic_write_json
            if isinstance(obj, dict):
                self._seen[name] = sig
                out.append((name, obj))
        return out


class ConfigApplier:
    """The slave's side: write a synced file and make the open store see it."""

    def __init__(self, store: MessageStore) -> None:
        self.store = store
        self._pending_progress: dict[str, Any] | None = None
        #: Synced files applied so far, by name (for ``status``).
        self.applied: dict[str, int] = {}

    def apply(self, name: str, content: dict[str, Any], log_end: int) -> None:
        """Apply one synced file; ``log_end`` is the replica's log end now."""
        if name == TOPICS:
            self._apply_topics(content)
        elif name == OFFSETS:
            self._apply_offsets(content)
        elif name == PROGRESS_FILE:
            self._pending_progress = content
            self.log_advanced(log_end)
            return
        else:
            raise ReplicationError(f"config sync of an unknown file {name!r}")
        self.applied[name] = self.applied.get(name, 0) + 1

    def log_advanced(self, log_end: int) -> None:
        """Write the held-back delay progress once the log reaches its ``logPos``."""
        p = self._pending_progress
        if p is None or int(p.get("logPos", -1)) > log_end:
            return
        atomic_write_json(self.store.root / "config" / PROGRESS_FILE, p)
        self._pending_progress = None
        self.applied[PROGRESS_FILE] = self.applied.get(PROGRESS_FILE, 0) + 1

    def _apply_topics(self, content: dict[str, Any]) -> None:
        raw = content.get("topicConfigTable")
        if not isinstance(raw, dict):
            raise ReplicationError("a synced topics.json without topicConfigTable")
        try:
            topics = {n: TopicConfig(**c) for n, c in raw.items()}
        except TypeError as exc:
            raise ReplicationError(
                f"a synced topics.json is malformed: {exc}"
            ) from None
        store = self.store
        registry = store.topic_registry
        with store.state.append_lock:
            registry.reload()
            old = registry.table.topics
            # Queues the slave already holds units for stay reachable even if
            # the master's file predates them (it is read, then the log moves).
            for name, cfg in old.items():
                new = topics.get(name)
                if new is not None and new.queue_nums < cfg.queue_nums:
                    new.read_queue_nums = max(new.read_queue_nums, cfg.read_queue_nums)
                    new.write_queue_nums = max(
                        new.write_queue_nums, cfg.write_queue_nums
                    )
            if topics == old:
                return
            registry.table.topics = topics
            registry.save()

    def _apply_offsets(self, content: dict[str, Any]) -> None:
        if not isinstance(content.get("offsetTable"), dict):
            raise ReplicationError("a synced consumerOffset.json without offsetTable")
        store = self.store
        with store.state.offsets_lock:
            atomic_write_json(store.root / "config" / OFFSETS, content)
            store.state.bump_offsets_version()
