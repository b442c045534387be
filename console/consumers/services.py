"""Consumer group operations: keep offsets in step with the store, show lag,
reset a group's offsets to a time or an offset (operator) and change a group's
settings (admin: FIFO, delivery attempts before the dead-letter queue), audited."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.db import transaction
from django.db.models import Count, Max, Sum
from django.utils import timezone

from broker_core.errors import BrokerError, TopicNotFoundError
from broker_core.groups import GroupConfig
from broker_core.lag import CONSUMER_TYPES
from broker_core.offset_reset import ResetChange
from console.audit.services import audited
from console.brokerlink import node_ops
from console.cluster.scope import store_key
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
    rows = [
        ConsumerQueue(
            node=store_key(),
            group=q.group,
            topic=q.topic,
            queue_id=q.queue_id,
            committed_offset=q.committed_offset,
            max_offset=q.max_offset,
            lag=q.lag,
            synced_at=now,
        )
        for q in node_ops().consumer_lag()
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
    return node_ops().group_queues(group)


def group_dead_letters(group: str) -> int:
    """How many messages sit in the group's dead-letter queue ``%DLQ%<group>``
    (0 when it has none): not part of its lag, which counts what is still to
    deliver."""
    try:
        queues = node_ops().queue_ranges(f"%DLQ%{group}")
    except TopicNotFoundError:
        return 0
    return sum(q["depth"] for q in queues)


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
    return node_ops().preview_reset(
        group, topic, to_offset=to_offset, to_ms=to_ms, queue_id=queue_id
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
    # The offsets before, for the audit; the node works the reset out again
    # when it makes it and answers what it changed. The node is looked up
    # (and may be away) within the audited action.
    try:
        before: dict[str, int] | None = {
            str(c.queue_id): c.current
            for c in preview_reset(
                group, topic, to_offset=to_offset, to_ms=to_ms, queue_id=queue_id
            )
        }
    except BrokerError:
        before = None  # refused: the reset below says why, audited as failed
    made = audited(
        lambda: node_ops().apply_reset(
            group, topic, to_offset=to_offset, to_ms=to_ms, queue_id=queue_id
        ),
        actor=actor,
        request=request,
        action="consumer_group.reset_offset",
        object_type="consumer_group",
        object_id=f"{group}@{topic}",
        reason=reason,
        before=before,
        after=lambda cs: {
            "to_offset": to_offset,
            "to_ms": to_ms,
            "offsets": {str(c.queue_id): c.target for c in cs},
        },
    )
    sync_offsets(force=True)
    return list(made)


def group_settings(group: str) -> dict[str, Any]:
    """A group's settings: ``fifo``, ``max_delivery_attempts`` (None: the
    endpoint's default), ``default_max_delivery_attempts``, the attempts in
    effect and whether the group has settings of its own (``configured``)."""
    return _settings_of(group, node_ops().groups())


def groups_settings() -> dict[str, dict[str, Any]]:
    """``group_settings`` of every group that has settings of its own."""
    answer = node_ops().groups()
    return {g.name: _settings_of(g.name, answer) for g in answer["groups"]}


def _settings_of(group: str, answer: dict[str, Any]) -> dict[str, Any]:
    default = int(answer["default_max_delivery_attempts"])
    cfg = next((g for g in answer["groups"] if g.name == group), None)
    attempts = cfg.max_delivery_attempts if cfg else None
    return {
        "group": group,
        "configured": cfg is not None,
        "fifo": bool(cfg and cfg.fifo),
        "max_delivery_attempts": attempts,
        "default_max_delivery_attempts": default,
        "effective_max_delivery_attempts": default if attempts is None else attempts,
    }


def _audited_settings(s: dict[str, Any] | GroupConfig) -> dict[str, Any]:
    if isinstance(s, GroupConfig):
        return {"fifo": s.fifo, "max_delivery_attempts": s.max_delivery_attempts}
    return {"fifo": s["fifo"], "max_delivery_attempts": s["max_delivery_attempts"]}


def update_group_settings(
    *,
    actor: Any,
    group: str,
    fifo: bool,
    max_delivery_attempts: int | None,
    reason: str,
    request: Any = None,
) -> dict[str, Any]:
    """Create or replace a consumer group's settings (admin): FIFO delivery
    (one message in flight per message group) and how many deliveries a
    message gets before ``%DLQ%<group>`` (None: the endpoint's default). The
    node's endpoint applies them to the next receive. Returns the settings as
    ``group_settings`` does; raises ``ValidationError`` for a bad name or
    attempts outside 1..1000 (audited as failed)."""
    seen: dict[str, Any] = {}

    def before() -> dict[str, Any] | None:
        seen.update(group_settings(group))
        return _audited_settings(seen) if seen["configured"] else None

    made = audited(
        lambda: node_ops().put_group(group, fifo, max_delivery_attempts),
        actor=actor,
        request=request,
        action="consumer_group.update_settings",
        object_type="consumer_group",
        object_id=group,
        reason=reason,
        before=before,
        after=_audited_settings,
    )
    default = seen["default_max_delivery_attempts"]
    return _settings_of(
        group, {"groups": [made], "default_max_delivery_attempts": default}
    )


def change_dicts(changes: list[ResetChange]) -> list[dict[str, Any]]:
    return [c.as_json() for c in changes]
