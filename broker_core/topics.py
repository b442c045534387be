"""Topic configurations as every process sees them (RocketMQ ``TopicConfigManager``).

``config/topics.json`` is shared by every process that has the store open; a
change bumps the shared ``topics_version`` and other processes reload on their
next append or pull. The append path reads ``queue_limits`` (topic -> number of
queues) without a lock.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from broker_core.config import StoreConfig
from broker_core.consumequeue import ConsumeQueueTable
from broker_core.errors import (
    InvalidQueueError,
    TopicExistsError,
    TopicNotFoundError,
    ValidationError,
)
from broker_core.metadata import (
    PERM_READ,
    PERM_WRITE,
    MessageType,
    TopicConfig,
    TopicTable,
)
from broker_core.offsets import ConsumerOffsets
from broker_core.shared import SharedState
from broker_core.validation import (
    SCHEDULE_TOPIC,
    TRANS_HALF_TOPIC,
    TRANS_OP_HALF_TOPIC,
    validate_topic,
)

log = logging.getLogger(__name__)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_queue_numbers(read: int, write: int, perm: int, message_type: str) -> None:
    """Refuse (``ValidationError``) settings a topic cannot be stored with: a
    queue number or permission that is no integer (a float or a boolean would
    be stored and break every reader of the topic table) or out of range, a
    message type that is not one."""
    for field, value in (("read_queue_nums", read), ("write_queue_nums", write),
                         ("perm", perm)):  # fmt: skip
        if not _is_int(value):
            raise ValidationError(
                f"{field} must be an integer, not {type(value).__name__}"
            )
    if not isinstance(message_type, str):
        raise ValidationError(
            f"message_type must be a string, not {type(message_type).__name__}"
        )
    if not (1 <= read <= 1024 and 1 <= write <= 1024):
        raise ValidationError("queue numbers must be between 1 and 1024")
    if perm & ~(PERM_READ | PERM_WRITE | 0x9):
        raise ValidationError(f"bad permission {perm}")
    if message_type not in {m.value for m in MessageType}:
        raise ValidationError(f"bad message type {message_type!r}")


class TopicRegistry:
    """Create, change, delete and look up topics; shared across processes."""

    def __init__(
        self,
        table: TopicTable,
        state: SharedState,
        cqs: ConsumeQueueTable,
        offsets: ConsumerOffsets,
        config: StoreConfig,
    ) -> None:
        self.table = table
        self.state = state
        self.cqs = cqs
        self.offsets = offsets
        self.config = config
        #: The shared ``topics_version`` this process last loaded.
        self.version = -1
        #: topic -> number of queues, for the append path's range check.
        self.queue_limits: dict[str, int] = {}
        #: Called after every reload (the store forgets cached queue ends).
        self.on_reload: Callable[[], None] = lambda: None

    # -- loading -------------------------------------------------------------
    def reload(self, force: bool = False) -> None:
        """Reload ``topics.json`` if another process changed it (or ``force``)."""
        v = self.state.topics_version
        if force or v != self.version:
            self.table.load()
            self.version = v
            self._refresh_limits()
            self.on_reload()  # a queue may have been dropped
            if not force:
                # Another process may have deleted (and re-created) a topic:
                # map consume queues afresh. Old mappings go when unreferenced,
                # so a pull in another thread is not cut off.
                self.cqs.forget()

    def save(self) -> None:
        """Write ``topics.json`` and tell the other processes."""
        self.table.persist()
        self.version = self.state.bump_topics_version()
        self._refresh_limits()

    def _put(self, topic: str, cfg: TopicConfig | None) -> None:
        """Set ``topic``'s config (None: remove it) and save. When the save
        fails (a full disk) the table is put back as the file still has it:
        a topic is never served from memory that ``topics.json`` lacks."""
        old = self.table.topics.get(topic)
        if cfg is None:
            self.table.topics.pop(topic, None)
        else:
            self.table.topics[topic] = cfg
        try:
            self.save()
        except BaseException:
            if old is None:
                self.table.topics.pop(topic, None)
            else:
                self.table.topics[topic] = old
            self._refresh_limits()
            raise

    def _refresh_limits(self) -> None:
        self.queue_limits = {n: c.queue_nums for n, c in self.table.topics.items()}

    def adopt_orphan_queues(self) -> None:
        """Give a config to every topic that has queues but none (a lost or
        older ``topics.json``): its messages stay reachable."""
        counts: dict[str, int] = {}
        for topic, qid in self.cqs.on_disk():
            counts[topic] = max(counts.get(topic, 0), qid + 1)
        missing = {t: n for t, n in counts.items() if t not in self.table.topics}
        for t, n in missing.items():
            log.warning("topic %r has consume queues but no config: restored", t)
            self.table.topics[t] = TopicConfig(t, n, n)
        if missing:
            self.save()

    def ensure_system_topics(self) -> None:
        """Create the transaction and schedule topics if they are missing."""
        wanted = {
            TRANS_HALF_TOPIC: 1,
            TRANS_OP_HALF_TOPIC: 1,
            SCHEDULE_TOPIC: len(self.config.delay_levels_ms),
        }
        missing = [t for t in wanted if t not in self.table.topics]
        for t in missing:
            self.table.topics[t] = TopicConfig(t, wanted[t], wanted[t])
        if missing:
            self.save()

    def ensure_queues(
        self, pairs: Iterable[tuple[str, int]], auto_create: bool, inner: bool
    ) -> None:
        """Check (topic, queue id) pairs for an append; create unknown topics.

        The caller holds the append lock. An unknown topic is created with
        ``default_queue_nums`` queues (``inner``: at least ``queue id + 1``)
        unless ``auto_create`` is off (``TopicNotFoundError``); a queue id out of
        range raises ``InvalidQueueError``.
        """
        topics = self.table.topics
        created: dict[str, TopicConfig] = {}
        for topic, qid in pairs:
            cfg = topics.get(topic) or created.get(topic)
            if cfg is None:
                if not auto_create:
                    raise TopicNotFoundError(f"topic {topic!r} does not exist")
                n = self.config.default_queue_nums
                if inner:
                    n = max(n, qid + 1)
                cfg = created[topic] = TopicConfig(topic, n, n)
            if not 0 <= qid < cfg.queue_nums:
                # (a topic this call would have made is not made either)
                raise InvalidQueueError(
                    f"queue id {qid} is out of range for topic {topic!r} "
                    f"(0..{cfg.queue_nums - 1})"
                )
        if created:
            topics.update(created)
            try:
                self.save()
            except BaseException:
                for topic in created:
                    topics.pop(topic, None)
                self._refresh_limits()
                raise

    # -- administration ------------------------------------------------------
    def create(
        self,
        topic: str,
        read_queue_nums: int = 4,
        write_queue_nums: int | None = None,
        perm: int = PERM_READ | PERM_WRITE,
        message_type: str = MessageType.NORMAL.value,
    ) -> TopicConfig:
        """Create a topic. Raises ``InvalidTopicError``, ``TopicExistsError``."""
        validate_topic(topic)
        write = read_queue_nums if write_queue_nums is None else write_queue_nums
        _check_queue_numbers(read_queue_nums, write, perm, message_type)
        with self.state.append_lock:
            self.reload()
            if topic in self.table.topics:
                raise TopicExistsError(f"topic {topic!r} already exists")
            cfg = TopicConfig(topic, read_queue_nums, write, perm, message_type)
            self._put(topic, cfg)
            return cfg

    def update(
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
        with self.state.append_lock:
            self.reload()
            old = self.table.topics.get(topic)
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
            self._put(topic, cfg)
            return cfg

    def delete(self, topic: str) -> None:
        """Delete a topic's config, consume queues and offsets (log records stay)."""
        with self.state.append_lock:
            self.reload()
            if topic not in self.table.topics:
                raise TopicNotFoundError(f"topic {topic!r} does not exist")
            # Its records stay in the log: recovery must not give them
            # queues again (and the topic back) after a restart.
            before = self.table.deleted.get(topic)
            self.table.deleted[topic] = self.state.commit_pos
            try:
                self._put(topic, None)
            except BaseException:
                if before is None:
                    self.table.deleted.pop(topic, None)
                else:
                    self.table.deleted[topic] = before
                raise
            self.cqs.drop(topic)
        self.offsets.drop_topic(topic)

    def all(self) -> list[TopicConfig]:
        """Return every topic's configuration, sorted by name."""
        self.reload()
        return [self.table.topics[n] for n in sorted(self.table.topics)]

    def find(self, topic: str) -> TopicConfig | None:
        """Return the current configuration of ``topic`` (None if unknown)."""
        self.reload()
        return self.table.topics.get(topic)

    def get(self, topic: str) -> TopicConfig:
        """Return one topic's configuration; ``TopicNotFoundError`` if unknown."""
        cfg = self.find(topic)
        if cfg is None:
            raise TopicNotFoundError(f"topic {topic!r} does not exist")
        return cfg
