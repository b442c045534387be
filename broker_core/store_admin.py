"""Topic administration and consumer offsets of ``MessageStore``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from broker_core.errors import (
    InvalidOffsetError,
    InvalidQueueError,
    TopicExistsError,
    TopicNotFoundError,
    ValidationError,
)
from broker_core.metadata import PERM_READ, PERM_WRITE, MessageType, TopicConfig
from broker_core.validation import validate_group, validate_topic

if TYPE_CHECKING:
    from broker_core.consumequeue import ConsumeQueueTable
    from broker_core.metadata import OffsetTable, TopicTable
    from broker_core.shared import SharedState


def _check_queue_numbers(read: int, write: int, perm: int, message_type: str) -> None:
    if not (1 <= read <= 1024 and 1 <= write <= 1024):
        raise ValidationError("queue numbers must be between 1 and 1024")
    if perm & ~(PERM_READ | PERM_WRITE | 0x9):
        raise ValidationError(f"bad permission {perm}")
    if message_type not in {m.value for m in MessageType}:
        raise ValidationError(f"bad message type {message_type!r}")


class StoreAdminMixin:
    """Topic create/update/delete/list and consumer offsets, shared across processes."""

    state: SharedState
    topics: TopicTable
    offsets: OffsetTable
    cqs: ConsumeQueueTable
    _offsets_version: int

    def _reload_topics(self, force: bool = False) -> None: ...  # pragma: no cover
    def _save_topics(self) -> None: ...  # pragma: no cover
    def _check_open(self) -> None: ...  # pragma: no cover

    # -- topics --------------------------------------------------------------
    def create_topic(
        self,
        topic: str,
        read_queue_nums: int = 4,
        write_queue_nums: int | None = None,
        perm: int = PERM_READ | PERM_WRITE,
        message_type: str = MessageType.NORMAL.value,
    ) -> TopicConfig:
        """Create a topic. Raises ``InvalidTopicError``, ``TopicExistsError``."""
        self._check_open()
        validate_topic(topic)
        write = read_queue_nums if write_queue_nums is None else write_queue_nums
        _check_queue_numbers(read_queue_nums, write, perm, message_type)
        with self.state.append_lock:
            self._reload_topics()
            if topic in self.topics.topics:
                raise TopicExistsError(f"topic {topic!r} already exists")
            cfg = TopicConfig(topic, read_queue_nums, write, perm, message_type)
            self.topics.topics[topic] = cfg
            self._save_topics()
            return cfg

    def update_topic(
        self,
        topic: str,
        read_queue_nums: int | None = None,
        write_queue_nums: int | None = None,
        perm: int | None = None,
        message_type: str | None = None,
    ) -> TopicConfig:
        """Change a topic's settings.

        Raises ``TopicNotFoundError``, ``ValidationError``.
        """
        self._check_open()
        with self.state.append_lock:
            self._reload_topics()
            old = self.topics.topics.get(topic)
            if old is None:
                raise TopicNotFoundError(f"topic {topic!r} does not exist")
            cfg = TopicConfig(
                topic,
                old.read_queue_nums if read_queue_nums is None else read_queue_nums,
                old.write_queue_nums if write_queue_nums is None else write_queue_nums,
                old.perm if perm is None else perm,
                old.message_type if message_type is None else message_type,
            )
            _check_queue_numbers(
                cfg.read_queue_nums, cfg.write_queue_nums, cfg.perm, cfg.message_type
            )
            self.topics.topics[topic] = cfg
            self._save_topics()
            return cfg

    def delete_topic(self, topic: str) -> None:
        """Delete a topic's config, consume queues and offsets (log records stay)."""
        self._check_open()
        with self.state.append_lock:
            self._reload_topics()
            if topic not in self.topics.topics:
                raise TopicNotFoundError(f"topic {topic!r} does not exist")
            del self.topics.topics[topic]
            self._save_topics()
            self.cqs.drop(topic)
        with self.state.offsets_lock:
            self._reload_offsets()
            self.offsets.drop_topic(topic)
            self._save_offsets()

    def list_topics(self) -> list[TopicConfig]:
        """Return every topic's configuration, sorted by name."""
        self._check_open()
        self._reload_topics()
        return [self.topics.topics[n] for n in sorted(self.topics.topics)]

    def get_topic(self, topic: str) -> TopicConfig:
        """Return one topic's configuration; ``TopicNotFoundError`` if unknown."""
        self._reload_topics()
        cfg = self.topics.topics.get(topic)
        if cfg is None:
            raise TopicNotFoundError(f"topic {topic!r} does not exist")
        return cfg

    # -- consumer offsets ----------------------------------------------------
    def _reload_offsets(self) -> None:
        v = self.state.offsets_version
        if v != self._offsets_version:
            self.offsets.load()
            self._offsets_version = v

    def _save_offsets(self) -> None:
        self.offsets.persist()
        self._offsets_version = self.state.bump_offsets_version()

    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """Persist ``offset`` (the next to consume) for a group on one queue.

        Internal groups such as ``CID_RMQ_SYS_TRANS`` are allowed on system
        topics. Raises ``InvalidGroupError``, ``TopicNotFoundError``,
        ``InvalidQueueError`` and ``InvalidOffsetError`` (negative or past the
        queue's max offset).
        """
        self._check_open()
        validate_group(group)
        cfg = self.get_topic(topic)
        if not 0 <= queue_id < cfg.queue_nums:
            raise InvalidQueueError(
                f"queue id {queue_id} is out of range for {topic!r}"
            )
        max_off = self.cqs.get(topic, queue_id).max_offset()
        if not 0 <= offset <= max_off:
            raise InvalidOffsetError(
                f"offset {offset} is outside [0, {max_off}] "
                f"for {topic!r} queue {queue_id}"
            )
        with self.state.offsets_lock:
            self._reload_offsets()
            self.offsets.set(group, topic, queue_id, offset)
            self._save_offsets()

    def committed_offset(self, group: str, topic: str, queue_id: int) -> int:
        """Return the committed offset of a group on a queue, or -1 if none."""
        self._check_open()
        validate_group(group)
        self._reload_offsets()
        return self.offsets.get(group, topic, queue_id)

    def all_offsets(self) -> dict[str, dict[int, int]]:
        """Return every committed offset: ``{"topic@group": {queue_id: offset}}``."""
        self._reload_offsets()
        return {k: dict(v) for k, v in self.offsets.offsets.items()}
