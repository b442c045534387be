"""Topic configuration and consumer offsets, persisted as JSON atomically.

Files follow RocketMQ's ``config/topics.json`` and ``config/consumerOffset.json``.
Every write goes to a temporary file, is fsynced and renamed over the old one,
whose previous version stays as ``.bak``; a damaged file falls back to it. The
shared state's version counters tell other processes to reload.
"""

from __future__ import annotations

import contextlib
import enum
import json
import logging
import os
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TypeVar

from broker_core.diskio import pwrite_all, storage_error
from broker_core.errors import ConfigFileError, TopicNotWritableError

log = logging.getLogger(__name__)
T = TypeVar("T")

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

    def check_writable(self) -> None:
        """Raise ``TopicNotWritableError`` unless clients may send to it."""
        if not self.perm & PERM_WRITE:
            raise TopicNotWritableError(
                f"the topic {self.topic_name!r} is read-only (perm {self.perm}): "
                "sending to it is forbidden; give it write permission (perm 6) "
                "to send"
            )

    @property
    def readable(self) -> bool:
        return bool(self.perm & PERM_READ)


def backup_path(path: Path) -> Path:
    """Return where the previous good version of ``path`` is kept."""
    return path.with_name(path.name + ".bak")


def _parses(path: Path) -> bool:
    """Whether ``path`` exists and holds JSON (worth keeping as the backup)."""
    try:
        json.loads(path.read_bytes())
    except (OSError, ValueError):
        return False
    return True


def temporary_name(path: Path, suffix: str) -> Path:
    """A name beside ``path`` for a file being written, of this process and
    thread alone (two threads of one process writing the same file once
    shared one, and one's rename found it gone)."""
    return path.with_name(
        f".{path.name}.{os.getpid()}.{threading.get_ident()}.{suffix}"
    )


def atomic_write_json(path: Path, data: Any) -> None:
    """Write ``data`` as JSON: temporary file, fsync, rename, fsync the directory.

    The version being replaced is kept as ``{name}.bak`` (a hard link, so the
    main file never goes missing). Raises ``StorageFullError`` /
    ``StorageIOError``; the old file is then left as it was.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temporary_name(path, "tmp")
    payload = json.dumps(data, indent=2, sort_keys=True).encode()
    what = f"writing {path.name}"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            pwrite_all(fd, payload, 0, what)
            os.fsync(fd)
        finally:
            os.close(fd)
        if _parses(path):
            # A damaged file never replaces the backup a reader fell back to.
            bak_tmp = temporary_name(path, "bak")
            with contextlib.suppress(FileNotFoundError):
                os.unlink(bak_tmp)
            with contextlib.suppress(FileNotFoundError):
                os.link(path, bak_tmp)
                os.replace(bak_tmp, backup_path(path))
            # A rename onto a link of the same file does nothing (POSIX): the
            # backup already was this version (another thread's write, or one
            # cut short after its backup), and bak_tmp is still there.
            with contextlib.suppress(FileNotFoundError):
                os.unlink(bak_tmp)
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise storage_error(exc, what) from exc
    except BaseException:  # pwrite_all's StorageFullError, say: no stray tmp
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    dfd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def _parse(path: Path, key: str) -> dict[str, Any] | None:
    """Return ``path``'s ``key`` object; None if the file is missing; raise if bad."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    data = json.loads(raw)  # ValueError for empty or garbled bytes
    if not isinstance(data, dict) or not isinstance(data.get(key, {}), dict):
        raise ValueError("not a JSON object of the expected shape")
    return data.get(key, {})  # type: ignore[no-any-return]


def read_config(path: Path, key: str, convert: Callable[[dict[str, Any]], T]) -> T:
    """Load a configuration file, falling back to its ``.bak`` if it is damaged.

    ``convert`` turns the file's ``key`` object into the table (raising
    ``ValueError``/``TypeError``/``KeyError`` on bad content). A missing file is
    an empty table. Raises ``ConfigFileError`` naming the file and the fix when
    neither the file nor its backup is usable.
    """
    problems = []
    for candidate in (path, backup_path(path)):
        try:
            obj = _parse(candidate, key)
            if obj is None:
                if candidate == path and not backup_path(path).exists():
                    return convert({})
                continue
            value = convert(obj)
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            problems.append(f"{candidate.name}: {exc}")
            continue
        if candidate != path:
            log.warning(
                "%s is unusable (%s); using the previous version %s",
                path,
                "; ".join(problems) or "missing",
                candidate.name,
            )
        return value
    consequence = (
        "topics come back with default settings (those with consume queues keep "
        "their queue count)"
        if key == "topicConfigTable"
        else "consumer groups restart from their consume-from position"
    )
    raise ConfigFileError(
        f"{path} is damaged and has no usable backup ({'; '.join(problems)}). "
        f"Restore it from a backup, or delete it and reopen: {consequence}."
    )


class TopicTable:
    """The topic configurations of a store: ``config/topics.json``."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.topics: dict[str, TopicConfig] = {}
        #: Deleted topics: name -> the log's end when it was deleted. Its
        #: records before that stay in the log but are no topic's any more:
        #: recovery and rebuilds give them no queue (``hides``).
        self.deleted: dict[str, int] = {}
        self.load()

    def load(self) -> None:
        """Read the file (or its backup); ``ConfigFileError`` if neither is usable."""
        self.topics = read_config(
            self.path,
            "topicConfigTable",
            lambda raw: {name: TopicConfig(**cfg) for name, cfg in raw.items()},
        )
        self.deleted = read_config(
            self.path,
            "deletedTopics",
            lambda raw: {name: int(end) for name, end in raw.items()},
        )

    def hides(self, topic: str, offset: int) -> bool:
        """Whether the record of ``topic`` at log ``offset`` belongs to a
        deleted incarnation of the topic (written before its deletion)."""
        return offset < self.deleted.get(topic, -1)

    def persist(self) -> None:
        atomic_write_json(
            self.path,
            {
                "topicConfigTable": {n: asdict(c) for n, c in self.topics.items()},
                "deletedTopics": dict(self.deleted),
            },
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
        """Read the file (or its backup); ``ConfigFileError`` if neither is usable."""
        self.offsets = read_config(
            self.path,
            "offsetTable",
            lambda raw: {
                key: {int(q): int(o) for q, o in queues.items()}
                for key, queues in raw.items()
            },
        )

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
