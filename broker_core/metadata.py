"""Topic configuration and consumer offsets, persisted as JSON atomically.

Files follow RocketMQ's ``config/topics.json`` and ``config/consumerOffset.json``.
Every write goes to a temporary file, is fsynced and renamed over the old one;
the shared state's version counters tell other processes to reload.
"""

from __future__ import annotations

import enum
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

PERM_PRIORITY = 0x8
PERM_READ = 0x4
PERM_WRITE = 0x2
PERM_INHERIT = 0x1


class MessageType(enum.StrEnum):
    NORMAL = "NORMAL"
    FIFO = "FIFO"
    DELAY = "DELAY"
    TRANSACTION = "TRANSACTION"
    MIXED = "MIXED"


@dataclass(slots=True)
class TopicConfig:
    """One topic's settings (RocketMQ ``TopicConfig``)."""

    topic_name: str
    read_queue_nums: int = 4
    write_queue_nums: int = 4
    perm: int = PERM_READ | PERM_WRITE
    message_type: str = MessageType.NORMAL.value
    topic_filter_type: str = "SINGLE_TAG"
    order: bool = False

    @property
    def queue_nums(self) -> int:
        """Queues that exist: RocketMQ accepts ids below max(read, write)."""
        return max(self.read_queue_nums, self.write_queue_nums)

    @property
    def writable(self) -> bool:
        return bool(self.perm & PERM_WRITE)

    @property
    def readable(self) -> bool:
        return bool(self.perm & PERM_READ)


def atomic_write_json(path: Path, data: Any) -> None:
    """Write ``data`` as JSON: temporary file, fsync, rename, fsync the directory."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    payload = json.dumps(data, indent=2, sort_keys=True).encode()
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, payload)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    dfd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def _read_json(path: Path) -> dict[str, Any]:
    try:
        with open(path, "rb") as fh:
            data = json.load(fh)
    except FileNotFoundError:
        return {}
    return data if isinstance(data, dict) else {}


class TopicTable:
    """The topic configurations of a store: ``config/topics.json``."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.topics: dict[str, TopicConfig] = {}
        self.load()

    def load(self) -> None:
        raw = _read_json(self.path).get("topicConfigTable", {})
        self.topics = {name: TopicConfig(**cfg) for name, cfg in raw.items()}

    def persist(self) -> None:
        atomic_write_json(
            self.path,
            {"topicConfigTable": {n: asdict(c) for n, c in self.topics.items()}},
        )


class OffsetTable:
    """Committed consumer offsets: ``config/consumerOffset.json``.

    Keys are ``topic@group`` as in RocketMQ; values map queue id to the next
    offset to consume.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offsets: dict[str, dict[int, int]] = {}
        self.load()

    def load(self) -> None:
        raw = _read_json(self.path).get("offsetTable", {})
        self.offsets = {
            key: {int(q): int(o) for q, o in queues.items()}
            for key, queues in raw.items()
        }

    def persist(self) -> None:
        atomic_write_json(
            self.path,
            {
                "offsetTable": {
                    key: {str(q): o for q, o in sorted(queues.items())}
                    for key, queues in self.offsets.items()
                }
            },
        )

    def get(self, group: str, topic: str, queue_id: int) -> int:
        return self.offsets.get(f"{topic}@{group}", {}).get(queue_id, -1)

    def set(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        self.offsets.setdefault(f"{topic}@{group}", {})[queue_id] = offset

    def drop_topic(self, topic: str) -> None:
        for key in [k for k in self.offsets if k.split("@", 1)[0] == topic]:
            del self.offsets[key]
