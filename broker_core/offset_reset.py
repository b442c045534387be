"""An operator's reset of a consumer group's committed offsets, to an offset or
a time (RocketMQ's ``resetOffsetByTimestamp``): preview what would change,
then apply it.

The console's consumer pages and the Cluster page (the node's
``preview_reset`` and ``apply_reset`` operations) both reset through here.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from broker_core.broker import Broker
from broker_core.browse import offset_for_time, queue_bounds
from broker_core.endpoint.popoffsets import request_reset
from broker_core.errors import InvalidOffsetError, ValidationError
from broker_core.store import MessageStore


@dataclass(slots=True)
class ResetChange:
    """One queue of a reset: its committed offset now (the queue's start if
    never committed), the offset it is reset to, and the queue's end."""

    topic: str
    queue_id: int
    current: int
    target: int
    max_offset: int

    @property
    def delta(self) -> int:
        """Positive: messages consumed again; negative: messages skipped."""
        return self.current - self.target

    @property
    def lag_after(self) -> int:
        return self.max_offset - self.target

    def as_json(self) -> dict[str, Any]:
        return asdict(self) | {"delta": self.delta, "lag_after": self.lag_after}


def preview_reset(
    store: MessageStore,
    group: str,
    topic: str,
    *,
    to_offset: int | None = None,
    to_ms: int | None = None,
    queue_id: int | None = None,
) -> list[ResetChange]:
    """Return what a reset would change on each queue, changing nothing.

    ``to_offset`` applies to one queue (``queue_id``) or, clamped to each
    queue's range, to all; ``to_ms`` finds each queue's first message at or
    after that time. Raises ``ValidationError`` when neither or both are
    given or either is negative (or not an integer), ``InvalidOffsetError``
    for an offset outside the one queue, ``InvalidQueueError`` and
    ``TopicNotFoundError``.
    """
    if (to_offset is None) == (to_ms is None):
        raise ValidationError("give either an offset or a time to reset to")
    for field, value in (("to_offset", to_offset), ("to_ms", to_ms)):
        if value is None:
            continue
        if not isinstance(value, int) or isinstance(value, bool):
            raise ValidationError(f"{field}: an integer, not {type(value).__name__}")
        if value < 0:
            raise ValidationError(f"{field}: must not be negative (given {value})")
    cfg = store.get_topic(topic)
    queues = range(cfg.queue_nums) if queue_id is None else [queue_id]
    changes = []
    for q in queues:
        lo, hi = queue_bounds(store, topic, q)
        if to_ms is not None:
            target = offset_for_time(store, topic, q, to_ms)
        else:
            assert to_offset is not None
            if queue_id is not None and not lo <= to_offset <= hi:
                raise InvalidOffsetError(
                    f"offset {to_offset} is outside [{lo}, {hi}] "
                    f"for {topic!r} queue {q}"
                )
            target = max(lo, min(to_offset, hi))
        current = store.committed_offset(group, topic, q)
        changes.append(
            ResetChange(topic, q, current if current >= 0 else lo, target, hi)
        )
    return changes


def apply_reset(
    broker: Broker, group: str, topic: str, changes: list[ResetChange]
) -> list[ResetChange]:
    """Commit the ``changes`` of a ``preview_reset`` and write them at once.

    Pull consumers read the new offsets on their next pull; RocketMQ 5 (pop)
    consumers read from the endpoint's own cursor, which takes them within
    half a second (``request_reset``). Returns ``changes``.
    """
    for c in changes:
        broker.commit_offset(group, topic, c.queue_id, c.target)
    # An operator's reset is written at once, not on the store's timer.
    broker.store.persist_offsets()
    request_reset(
        broker.store.root, group, topic, {c.queue_id: c.target for c in changes}
    )
    return changes
