"""Consumer group operations: keep offsets in step with the store, show lag,
and reset a group's offsets to a time or an offset (operator), audited."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.db import transaction
from django.db.models import Count, Max, Sum
from django.utils import timezone

from broker_core import offset_reset
from broker_core.lag import CONSUMER_TYPES, consumer_lag, lag_of, subscribed_queues
from broker_core.offset_reset import ResetChange
from console.audit.services import audited
from console.brokerlink import get_broker
from console.consumers.models import ConsumerQueue

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


def preview_reset(
    group: str,
    topic: str,
    *,
    to_offset: int | None = None,
    to_ms: int | None = None,
    queue_id: int | None = None,
) -> list[ResetChange]:
    """Return what a reset would change on each queue, without changing anything
    (``broker_core.offset_reset.preview_reset``)."""
    return offset_reset.preview_reset(
        get_broker().store,
        group,
        topic,
        to_offset=to_offset,
        to_ms=to_ms,
        queue_id=queue_id,
    )


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
    audited(
        lambda: offset_reset.apply_reset(broker, group, topic, changes),
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
    return [c.as_json() for c in changes]
