"""Delayed delivery: RocketMQ's delay levels and timer (arbitrary time) messages.

``DelayService(broker)`` parks messages sent with a ``DELAY`` level or a
``TIMER_*`` property (or through ``send_delayed``), delivers them when due with
``deliver_due``, recalls them with ``recall`` and reports ``stats``. See
``docs/delay.md``.
"""

from broker_core.schedule.results import (
    DelayStats,
    DeliveryResult,
    LevelStats,
    RecallResult,
    ScheduledMessage,
    ScheduleKind,
    TimerStats,
)
from broker_core.schedule.rewrite import (
    DEFAULT_MAX_DELAY_MS,
    PROPERTY_DELAY_SRC,
    PROPERTY_TIMER_DEL_UNIQKEY,
    PROPERTY_TIMER_DELAY_MS,
    PROPERTY_TIMER_DELAY_SEC,
    PROPERTY_TIMER_DELIVER_MS,
    PROPERTY_TIMER_OUT_MS,
    ScheduleSpec,
    install_send_hook,
    parse_schedule,
    rewrite_for_schedule,
    schedule_properties,
)
from broker_core.schedule.service import DelayService
from broker_core.schedule.wheel import TimerWheel

__all__ = [
    "DEFAULT_MAX_DELAY_MS",
    "PROPERTY_DELAY_SRC",
    "PROPERTY_TIMER_DELAY_MS",
    "PROPERTY_TIMER_DELAY_SEC",
    "PROPERTY_TIMER_DELIVER_MS",
    "PROPERTY_TIMER_DEL_UNIQKEY",
    "PROPERTY_TIMER_OUT_MS",
    "DelayService",
    "DelayStats",
    "DeliveryResult",
    "LevelStats",
    "RecallResult",
    "ScheduleKind",
    "ScheduleSpec",
    "ScheduledMessage",
    "TimerStats",
    "TimerWheel",
    "install_send_hook",
    "parse_schedule",
    "rewrite_for_schedule",
    "schedule_properties",
]
