"""Client and console operations of ``DelayService``: send, recall, stats, browse."""

from __future__ import annotations

from typing import TYPE_CHECKING

from broker_core.errors import RecallError
from broker_core.message import (
    PROPERTY_REAL_TOPIC,
    PROPERTY_UNIQ_KEY,
    Message,
    MessageExt,
    MessageInner,
    SendResult,
)
from broker_core.schedule.results import (
    DelayStats,
    RecallResult,
    ScheduledMessage,
    ScheduleKind,
)
from broker_core.schedule.rewrite import (
    PROPERTY_DELAY_SRC,
    PROPERTY_TIMER_DEL_UNIQKEY,
    PROPERTY_TIMER_OUT_MS,
    schedule_properties,
)
from broker_core.validation import SCHEDULE_TOPIC, TIMER_TOPIC

if TYPE_CHECKING:
    from broker_core.broker import Broker
    from broker_core.schedule.progress import Progress
    from broker_core.shared import FileLock
    from broker_core.store import MessageStore


def wall_ms() -> int:
    import time

    return int(time.time() * 1000)


class OperationsMixin:
    """Sends, recalls and console views; each takes the schedule lock."""

    broker: Broker
    store: MessageStore
    levels_ms: list[int]
    progress: Progress
    _lock: FileLock
    _level_next: dict[int, int]

    if TYPE_CHECKING:

        def _sync(self, claim: bool = True) -> None:
            raise NotImplementedError

        def _enqueue_timers(self) -> None:
            raise NotImplementedError

        def _apply_src(self, src: str, cancel: bool) -> None:
            raise NotImplementedError

        def _persist(self) -> None:
            raise NotImplementedError

        def find_scheduled(self, msg_id: str) -> MessageExt:
            raise NotImplementedError

        def collect_stats(self, now: int) -> DelayStats:
            raise NotImplementedError

        def collect_scheduled(
            self,
            kind: ScheduleKind | str | None,
            level: int | None,
            limit: int,
            start: int,
        ) -> list[ScheduledMessage]:
            raise NotImplementedError

    # -- sending -------------------------------------------------------------
    def send_delayed(
        self,
        message: Message,
        *,
        level: int | None = None,
        deliver_at_ms: int | None = None,
        delay_ms: int | None = None,
    ) -> SendResult:
        """Send ``message`` for later delivery: a level, an absolute time or a delay.

        Exactly one of the three must be given. Raises ``InvalidDelayError``
        (negative, beyond ``max_delay_ms``, none or several given) and the send
        errors of ``Broker.send``.
        """
        props = dict(message.properties or {})
        props.update(schedule_properties(level, deliver_at_ms, delay_ms))
        msg = Message(
            message.topic,
            message.body,
            message.tags,
            message.keys,
            props,
            message.queue_id,
            message.flag,
        )
        return self.broker.send(msg)

    # -- recall --------------------------------------------------------------
    def recall(self, msg_id: str) -> RecallResult:
        """Cancel a scheduled message (level or timer) before it is delivered.

        ``msg_id`` is its UNIQ_KEY or offset id. Raises ``RecallError`` if no
        such scheduled message exists or it was already delivered or recalled.
        """
        with self._lock:
            self._sync()
            m = self.find_scheduled(msg_id)
            p = self.progress
            uniq = m.properties.get(PROPERTY_UNIQ_KEY, m.offset_msg_id)
            real = m.properties.get(PROPERTY_REAL_TOPIC, "")
            if m.topic == SCHEDULE_TOPIC:
                level, qoff = m.queue_id + 1, m.queue_offset
                if qoff in p.cancelled.get(level, ()):
                    raise RecallError(f"message {msg_id!r} was already recalled")
                if not p.level_pending(level, qoff):
                    raise RecallError(f"message {msg_id!r} was already delivered")
                src, kind = f"L{level}:{qoff}", ScheduleKind.LEVEL
                due = m.store_timestamp + self.levels_ms[level - 1]
            else:
                level, qoff = 0, m.queue_offset
                if p.timer_is_done(qoff):
                    raise RecallError(
                        f"message {msg_id!r} was already delivered or recalled"
                    )
                src, kind = f"T:{qoff}", ScheduleKind.TIMER
                due = int(m.properties.get(PROPERTY_TIMER_OUT_MS, "0"))
            marker = MessageInner(
                topic=TIMER_TOPIC,
                queue_id=0,
                body=b"recall",
                properties={
                    PROPERTY_TIMER_DEL_UNIQKEY: f"{real}+{uniq}",
                    PROPERTY_DELAY_SRC: src,
                },
            )
            put = self.store.put_inner(marker)
            p.mark_timer_done(put.queue_offset)
            self._apply_src(src, cancel=True)
            self._level_next.pop(level, None)
            self._persist()
        return RecallResult(msg_id, kind, level, due, real)

    # -- console -------------------------------------------------------------
    def stats(self, now_ms: int | None = None) -> DelayStats:
        """Return per-level and timer statistics (see ``DelayStats``)."""
        with self._lock:
            self._sync(claim=False)
            self._enqueue_timers()
            return self.collect_stats(wall_ms() if now_ms is None else now_ms)

    def list_scheduled(
        self,
        kind: ScheduleKind | str | None = None,
        level: int | None = None,
        limit: int = 50,
        start: int = 0,
    ) -> list[ScheduledMessage]:
        """Return pending scheduled messages, earliest due first (for browsing)."""
        with self._lock:
            self._sync(claim=False)
            self._enqueue_timers()
            return self.collect_scheduled(kind, level, limit, start)
