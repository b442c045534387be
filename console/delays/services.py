"""Delay queue operations: level and timer statistics, browse scheduled
messages, cancel one (operator, audited). Read live from ``broker_core.schedule``:
18 levels and one timer wheel need no table of their own."""

from __future__ import annotations

from typing import Any

from broker_core.schedule import DelayStats, ScheduledMessage
from console.audit.services import audited
from console.brokerlink import node_ops


def delay_stats() -> DelayStats:
    """Return every level's backlog, next due and oldest overdue, and the timers."""
    return node_ops().delay_stats()


def level_rows(stats: DelayStats) -> list[dict[str, Any]]:
    """Levels as dicts with a delivery progress percentage."""
    return [lv.as_json() for lv in stats.levels]


def list_scheduled(
    kind: str | None = None,
    level: int | None = None,
    limit: int = 50,
    start: int = 0,
) -> list[ScheduledMessage]:
    """Return pending scheduled messages, earliest due first."""
    return node_ops().list_scheduled(kind or None, level, limit, start)


def cancel_scheduled(
    *, actor: Any, msg_id: str, reason: str, request: Any = None
) -> Any:
    """Recall a scheduled message before it is delivered (operator).

    Raises ``RecallError`` when it is unknown, delivered or already cancelled.
    """
    return audited(
        lambda: node_ops().recall(msg_id),
        actor=actor,
        request=request,
        action="delay.cancel",
        object_type="scheduled_message",
        object_id=msg_id,
        reason=reason,
        after=lambda r: {
            "kind": r.kind.value,
            "level": r.level,
            "due_ms": r.due_ms,
            "real_topic": r.real_topic,
        },
    )
