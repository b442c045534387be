"""Consumer group operations: keep offsets in step with the store, show lag,
and reset a group's offsets to a time or an offset (operator), audited."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import timedelta
from typing import Any

from django.db import transaction
from django.db.models import Count, Max, Sum
from django.utils import timezone

from broker_core.endpoint.pop import request_reset
from broker_core.errors import InvalidOffsetError, ValidationError
from broker_core.lag import CONSUMER_TYPES, consumer_lag, lag_of, subscribed_queues
from console.audit.services import audited
from console.brokerlink import get_broker
from console.consumers.models import ConsumerQueue
from console.messages.services import offset_for_time

SYNC_MAX_AGE = timedelta(seconds=5)


def group_clients(group: str) -> list[dict[str, Any]]:
    """The consumer clients of ``group`` the gRPC endpoint last saw."""
    from console.transactions.producers import connected_clients

    return [
        c
        for c in connected_clients()
        if c.get("group") == group and c.get("client_type") in CONSUMER_TYPES
    ]


def sync_offsets(force: bool = False) -> int:
    """Copy every committed offset and its queue's depth into ``ConsumerQueue``."""
    now = timezone.now()
    latest = (
        ConsumerQueue.objects.order_by("-synced_at")
        .values_list("synced_at", flat=True)
        .first()
    )
    if not force and latest is not None and now - latest < SYNC_MAX_AGE:
        return ConsumerQueue.objects.count()
    from console.transactions.producers import connected_clients

    rows = [
        ConsumerQueue(
            group=q.group,
            topic=q.topic,
            queue_id=q.queue_id,
            committed_offset=q.committed_offset,
            max_offset=q.max_offset,
            lag=q.lag,
            synced_at=now,
        )
        for q in consumer_lag(get_broker().store, connected_clients())
    ]
    with transaction.atomic():
        ConsumerQueue.objects.all().delete()
        ConsumerQueue.objects.bulk_create(rows)
    return len(rows)


def group_summaries(queryset: Any = None) -> Any:
    """Per-group totals: topics, queues, lag and the worst queue's lag."""
    qs = ConsumerQueue.objects.all() if queryset is None else queryset
    return (
        qs.values("group")
        .annotate(
            topics=Count("topic", distinct=True),
            queues=Count("id"),
            total_lag=Sum("lag"),
            max_lag=Max("lag"),
            synced_at=Max("synced_at"),
        )
        .order_by("group")
    )


def group_queues(group: str) -> list[dict[str, Any]]:
    """Live per-queue state of a group: committed, max, lag, last consumed time."""
    from console.transactions.producers import connected_clients

    store = get_broker().store
    out = []
    for g, topic, qid, committed in subscribed_queues(store, connected_clients()):
        if g != group:
            continue
        hi, lag = lag_of(store, topic, qid, committed)
        last_ms = None
        if committed > store.min_offset(topic, qid):
            units = store.get_queue_units(topic, qid, committed - 1, 1)
            if units:
                last_ms = store.read_message(units[0][0]).store_timestamp
        out.append(
            {
                "topic": topic,
                "queue_id": qid,
                "committed_offset": committed,
                "max_offset": hi,
                "lag": lag,
                "last_consumed_ms": last_ms,
            }
        )
    return out


@dataclass(slots=True)
class ResetChange:
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


def preview_reset(
    group: str,
    topic: str,
    *,
    to_offset: int | None = None,
    to_ms: int | None = None,
    queue_id: int | None = None,
) -> list[ResetChange]:
    """Return what a reset would change on each queue, without changing anything.

    ``to_offset`` applies to one queue (``queue_id``) or, clamped to each
    queue's range, to all; ``to_ms`` finds each queue's first message at or
    after that time. Raises ``ValidationError`` when neither or both are given.
    """
    if (to_offset is None) == (to_ms is None):
        raise ValidationError("give either an offset or a time to reset to")
    store = get_broker().store
    cfg = store.get_topic(topic)
    queues = range(cfg.queue_nums) if queue_id is None else [queue_id]
    changes = []
    for q in queues:
        lo, hi = store.min_offset(topic, q), store.max_offset(topic, q)
        if to_ms is not None:
            target = offset_for_time(topic, q, to_ms)
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


def reset_offsets(
    *,
    actor: Any,
    group: str,
    topic: str,
    reason: str,
    to_offset: int | None = None,
    to_ms: int | None = None,
    queue_id: int | None = None,
    request: Any = None,
) -> list[ResetChange]:
    """Move a group's committed offsets (operator); consumers pick them up on
    their next pull. Returns the changes made."""
    broker = get_broker()
    changes = preview_reset(
        group, topic, to_offset=to_offset, to_ms=to_ms, queue_id=queue_id
    )

    def apply() -> list[ResetChange]:
        for c in changes:
            broker.commit_offset(group, topic, c.queue_id, c.target)
        # An operator's reset is written at once, not on the store's timer.
        broker.store.persist_offsets()
        # RocketMQ 5 (pop) consumers read from the endpoint's own cursor: it
        # takes the new offsets within half a second.
        request_reset(
            broker.store.root, group, topic, {c.queue_id: c.target for c in changes}
        )
        return changes

    audited(
        apply,
        actor=actor,
        request=request,
        action="consumer_group.reset_offset",
        object_type="consumer_group",
        object_id=f"{group}@{topic}",
        reason=reason,
        before={str(c.queue_id): c.current for c in changes},
        after=lambda cs: {
            "to_offset": to_offset,
            "to_ms": to_ms,
            "offsets": {str(c.queue_id): c.target for c in cs},
        },
    )
    sync_offsets(force=True)
    return changes


def change_dicts(changes: list[ResetChange]) -> list[dict[str, Any]]:
    return [asdict(c) | {"delta": c.delta, "lag_after": c.lag_after} for c in changes]
