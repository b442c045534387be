"""Look-ups for the console: find, list and count pending scheduled messages.

``ScheduleBrowser`` reads; it owns no state. ``DelayService`` holds one and
passes it the schedule's current progress and timer wheel under its lock."""

from __future__ import annotations

from typing import TYPE_CHECKING

from broker_core.errors import MessageNotFoundError, UnknownScheduledMessageError
from broker_core.message import PROPERTY_REAL_QID, PROPERTY_REAL_TOPIC, MessageExt
from broker_core.schedule.results import (
    DelayStats,
    LevelStats,
    ScheduledMessage,
    ScheduleKind,
    TimerStats,
)
from broker_core.schedule.rewrite import PROPERTY_DELAY_SRC, PROPERTY_TIMER_OUT_MS
from broker_core.validation import SCHEDULE_TOPIC, TIMER_TOPIC

if TYPE_CHECKING:
    from collections.abc import Callable

    from broker_core.broker import Broker
    from broker_core.schedule.progress import Progress
    from broker_core.schedule.wheel import TimerWheel
    from broker_core.store import MessageStore

    #: (level, queue offset, stored due ms, now ms) -> effective due ms
    LevelDue = Callable[[int, int, int, int], int]

_MINUTE, _HOUR, _DAY = 60_000, 3_600_000, 86_400_000


class ScheduleBrowser:
    """Read-only views of the schedule (the caller holds the schedule lock)."""

    def __init__(self, broker: Broker, levels_ms: list[int]) -> None:
        self.broker = broker
        self.store: MessageStore = broker.store
        self.levels_ms = levels_ms

    def find(self, msg_id: str) -> MessageExt:
        """Return the parked record of a scheduled message;
        ``UnknownScheduledMessageError`` if none."""
        for topic in (SCHEDULE_TOPIC, TIMER_TOPIC):
            try:
                m = self.broker.get_message(msg_id, topic=topic)
            except MessageNotFoundError:
                continue
            if m.topic == topic and PROPERTY_DELAY_SRC not in m.properties:
                return m
        raise UnknownScheduledMessageError(f"no scheduled message with id {msg_id!r}")

    def _level_head(self, p: Progress, level: int) -> tuple[int, int] | None:
        """Return (queue offset, due ms) of a level's first pending message
        with a known due time.

        A unit whose due time reads 0 (the placeholder of a damaged record, or
        a zeroed tag field) has none: it is stepped over, so the level's next
        due and overdue come from real due times, never from the epoch.
        """
        q = level - 1
        off = p.level_offset(level)
        cancelled = p.cancelled.get(level, ())
        while off < self.store.max_offset(SCHEDULE_TOPIC, q):
            units = self.store.get_queue_units(SCHEDULE_TOPIC, q, off, 256)
            if not units:
                break
            for _phys, _size, due in units:
                if off not in cancelled and due > 0:
                    return off, due
                off += 1
        return None

    def stats(
        self,
        p: Progress,
        wheel: TimerWheel,
        now: int,
        level_due: LevelDue,
        last_error: str | None,
    ) -> DelayStats:
        """Per-level backlogs and due times, timers by horizon, deliveries."""
        levels: list[LevelStats] = []
        for level, delay in enumerate(self.levels_ms, start=1):
            q = level - 1
            off = p.level_offset(level)
            hi = self.store.max_offset(SCHEDULE_TOPIC, q)
            head = self._level_head(p, level)
            nxt = None if head is None else level_due(level, head[0], head[1], now)
            levels.append(
                LevelStats(
                    level=level,
                    delay_ms=delay,
                    queue_id=q,
                    offset=off,
                    max_offset=hi,
                    backlog=max(0, hi - off - len(p.cancelled.get(level, ()))),
                    next_due_ms=nxt,
                    oldest_overdue_ms=max(0, now - nxt) if nxt is not None else 0,
                    units_lost=max(0, p.lost.get(level, 0) - hi),
                )
            )
        counts = [0, 0, 0, 0]
        pending = 0
        first: int | None = None
        for _start, bucket in wheel.iter_buckets():
            for due, qoff, _phys in bucket:
                if p.timer_is_done(qoff):
                    continue
                pending += 1
                # A timer without its due time (0: the property missing) is
                # counted, but no due time or overdue is made of it.
                if due > 0 and (first is None or due < first):
                    first = due
                ahead = due - now
                i = (
                    0
                    if ahead <= _MINUTE
                    else 1
                    if ahead <= _HOUR
                    else 2
                    if ahead <= _DAY
                    else 3
                )
                counts[i] += 1
        timers = TimerStats(
            pending=pending,
            next_due_ms=first,
            oldest_overdue_ms=max(0, now - first) if first is not None else 0,
            due_next_minute=counts[0],
            due_next_hour=counts[1],
            due_next_day=counts[2],
            due_later=counts[3],
            units_lost=max(0, p.lost.get(0, 0) - self.store.max_offset(TIMER_TOPIC, 0)),
        )
        per_minute = {m * _MINUTE: n for m, n in sorted(p.delivered.items())}
        last = p.delivered.get(now // _MINUTE - 1, 0)
        return DelayStats(now, levels, timers, per_minute, last, last_error)

    def _describe(
        self, m: MessageExt, kind: ScheduleKind, level: int, due: int
    ) -> ScheduledMessage:
        props = m.properties
        return ScheduledMessage(
            msg_id=m.msg_id,
            offset_msg_id=m.offset_msg_id,
            kind=kind,
            level=level,
            real_topic=props.get(PROPERTY_REAL_TOPIC, ""),
            real_queue_id=int(props.get(PROPERTY_REAL_QID, "0")),
            due_ms=due,
            tags=m.tags,
            keys=m.keys,
            store_timestamp=m.store_timestamp,
            body_size=len(m.body),
        )

    def scheduled(
        self,
        p: Progress,
        wheel: TimerWheel,
        kind: ScheduleKind | str | None,
        level: int | None,
        limit: int,
        start: int,
    ) -> list[ScheduledMessage]:
        """Pending scheduled messages, earliest due first, ``start``/``limit``."""
        want = None if kind is None else ScheduleKind(kind)
        need = max(0, start) + max(0, limit)
        found: list[
            tuple[int, ScheduleKind, int, int]
        ] = []  # due, kind, level, log offset
        if want in (None, ScheduleKind.LEVEL):
            for lv in range(1, len(self.levels_ms) + 1):
                if level is not None and lv != level:
                    continue
                off = p.level_offset(lv)
                cancelled = p.cancelled.get(lv, ())
                units = self.store.get_queue_units(SCHEDULE_TOPIC, lv - 1, off, need)
                for i, (phys, _size, due) in enumerate(units):
                    if off + i not in cancelled:
                        found.append((due, ScheduleKind.LEVEL, lv, phys))
        if want in (None, ScheduleKind.TIMER) and level in (None, 0):
            for due, qoff, phys in wheel.earliest(need * 2 + 16):
                if not p.timer_is_done(qoff):
                    found.append((due, ScheduleKind.TIMER, 0, phys))
        found.sort(key=lambda t: (t[0], t[3]))
        out = []
        for due, k, lv, phys in found[start:need]:
            m = self.store.read_message(phys)
            if k is ScheduleKind.TIMER:
                due = int(m.properties.get(PROPERTY_TIMER_OUT_MS, due))
            out.append(self._describe(m, k, lv, due))
        return out
