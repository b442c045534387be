"""Result and statistics dataclasses of the schedule service."""

from __future__ import annotations

import enum
from dataclasses import asdict, dataclass, field
from typing import Any


class ScheduleKind(enum.StrEnum):
    LEVEL = "level"
    TIMER = "timer"


@dataclass(slots=True)
class DeliveryResult:
    """What ``DelayService.deliver_due`` did."""

    delivered: int = 0
    levels_delivered: int = 0
    timers_delivered: int = 0
    passes: int = 0
    failures: int = 0
    #: Earliest due time still pending when the call returned (ms), if any.
    next_due_ms: int | None = None
    elapsed_s: float = 0.0
    #: The last delivery error seen (the same messages are retried later).
    last_error: str | None = None


@dataclass(slots=True)
class RecallResult:
    """A recalled (cancelled) scheduled message."""

    msg_id: str
    kind: ScheduleKind
    level: int
    due_ms: int
    real_topic: str


@dataclass(slots=True)
class ScheduledMessage:
    """One pending scheduled message, for browsing."""

    msg_id: str
    offset_msg_id: str
    kind: ScheduleKind
    level: int
    real_topic: str
    real_queue_id: int
    due_ms: int
    tags: str | None
    keys: str | None
    store_timestamp: int
    body_size: int


@dataclass(slots=True)
class LevelStats:
    level: int
    delay_ms: int
    queue_id: int
    #: Next consume-queue offset to deliver and the queue's end.
    offset: int
    max_offset: int
    backlog: int
    next_due_ms: int | None
    #: How long the head has been due (ms), 0 if nothing is overdue.
    oldest_overdue_ms: int
    #: How far the level had delivered beyond the queue's end now
    #: (``Progress.lost``): at least this many units were lost with a deleted
    #: or cut consume queue, and ``backlog`` is not known. 0: none seen.
    units_lost: int = 0

    @property
    def progress(self) -> float:
        """Return the share of the level's messages delivered, in percent
        (100 for a level never written to)."""
        if self.max_offset == 0:
            return 100.0
        return round(100.0 * self.offset / self.max_offset, 1)

    def as_json(self) -> dict[str, Any]:
        """Return the figures and ``progress`` as a JSON object."""
        return asdict(self) | {"progress": self.progress}


@dataclass(slots=True)
class TimerStats:
    pending: int
    next_due_ms: int | None
    oldest_overdue_ms: int
    #: Pending timers by due time: overdue or within a minute, an hour, a day, later.
    due_next_minute: int
    due_next_hour: int
    due_next_day: int
    due_later: int
    #: As ``LevelStats.units_lost``, for the timer queue.
    units_lost: int = 0


@dataclass(slots=True)
class DelayStats:
    now_ms: int
    levels: list[LevelStats]
    timers: TimerStats
    #: Deliveries per minute (minute start in ms -> count), last 60 minutes.
    delivered_per_minute: dict[int, int] = field(default_factory=dict)
    delivered_last_minute: int = 0
    last_error: str | None = None

    def as_json(self) -> dict[str, Any]:
        """Return what the delay pages and the admin API show, as JSON: the
        levels with their progress, the timers, the last minute's deliveries
        and the last delivery error."""
        return {
            "now_ms": self.now_ms,
            "levels": [lv.as_json() for lv in self.levels],
            "timers": asdict(self.timers),
            "delivered_last_minute": self.delivered_last_minute,
            "last_error": self.last_error,
        }
