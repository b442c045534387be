"""Topic operations for the console: keep the topic table in step with the
store, and create, update and delete topics (admins), each audited."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Any

from django.db import transaction
from django.utils import timezone

from broker_core.validation import is_system_topic
from console.audit.services import audited
from console.brokerlink import node_ops
from console.cluster.scope import store_key
from console.topics.models import Topic, TopicSample

#: A list page older than this re-reads the store before answering.
SYNC_MAX_AGE = timedelta(seconds=5)
#: Rates compare with a sample at least this old; samples older than a day go.
RATE_WINDOW = timedelta(seconds=60)
SAMPLE_EVERY = timedelta(seconds=10)
SAMPLE_KEEP = timedelta(hours=24)


def is_internal(name: str) -> bool:
    """Half, op, schedule, retry and dead-letter topics are the broker's own."""
    return is_system_topic(name) or name.startswith(("%RETRY%", "%DLQ%", "RMQ_SYS_"))


def sync_topics(force: bool = False) -> int:
    """Copy every topic's settings and depth from the store into ``Topic``.

    Skipped when the table was synced within ``SYNC_MAX_AGE`` unless ``force``.
    Returns the number of topics.
    """
    now = timezone.now()
    latest = (
        Topic.objects.order_by("-synced_at").values_list("synced_at", flat=True).first()
    )
    if not force and latest is not None and now - latest < SYNC_MAX_AGE:
        return Topic.objects.count()
    rows = node_ops().topics_with_depths()
    last_sample = (
        TopicSample.objects.order_by("-at").values_list("at", flat=True).first()
    )
    take_sample = last_sample is None or now - last_sample >= SAMPLE_EVERY
    with transaction.atomic():
        existing = {t.name: t for t in Topic.objects.all()}
        seen = set()
        for cfg, depths in rows:
            name = cfg.topic_name
            seen.add(name)
            total = sum(depths)
            values = dict(
                read_queue_nums=cfg.read_queue_nums,
                write_queue_nums=cfg.write_queue_nums,
                perm=cfg.perm,
                message_type=cfg.message_type,
                system=is_internal(name),
                queues=cfg.queue_nums,
                messages=total,
                depths=depths,
                synced_at=now,
                produce_rate=_rate(name, total, now),
            )
            topic = existing.get(name)
            if topic is None:
                Topic.objects.create(node=store_key(), name=name, **values)
            else:
                Topic.objects.filter(pk=topic.pk).update(**values)
        Topic.objects.exclude(name__in=seen).delete()
        if take_sample:
            TopicSample.objects.bulk_create(
                TopicSample(
                    node=store_key(), topic=cfg.topic_name, at=now, messages=sum(d)
                )
                for cfg, d in rows
            )
            TopicSample.objects.filter(at__lt=now - SAMPLE_KEEP).delete()
    return len(rows)


def _rate(name: str, total: int, now: Any) -> float:
    """Messages per minute since the newest sample at least RATE_WINDOW old."""
    old = (
        TopicSample.objects.filter(topic=name, at__lte=now - RATE_WINDOW)
        .order_by("-at")
        .values_list("at", "messages")
        .first()
    )
    if old is None:
        return 0.0
    seconds = (now - old[0]).total_seconds()
    return max(0.0, (total - old[1]) * 60.0 / seconds) if seconds > 0 else 0.0


def topic_history(name: str, hours: int = 24) -> list[tuple[Any, int]]:
    """Return ``(time, messages)`` samples of one topic for a chart."""
    since = timezone.now() - timedelta(hours=hours)
    return list(
        TopicSample.objects.filter(topic=name, at__gte=since)
        .order_by("at")
        .values_list("at", "messages")
    )


def _config_dict(cfg: Any) -> dict[str, Any]:
    return dataclasses.asdict(cfg)


def create_topic(
    *,
    actor: Any,
    name: str,
    read_queue_nums: int,
    write_queue_nums: int,
    perm: int,
    message_type: str,
    reason: str = "",
    request: Any = None,
) -> Any:
    """Create a topic in the store and in the table (admin)."""
    cfg = audited(
        lambda: node_ops().create_topic(
            name, read_queue_nums, write_queue_nums, perm, message_type
        ),
        actor=actor,
        request=request,
        action="topic.create",
        object_type="topic",
        object_id=name,
        reason=reason,
        after=_config_dict,
    )
    sync_topics(force=True)
    return cfg


def update_topic(
    *,
    actor: Any,
    name: str,
    reason: str = "",
    request: Any = None,
    **changes: Any,
) -> Any:
    """Change a topic's queue numbers, permission or message type (admin)."""
    cfg = audited(
        lambda: node_ops().update_topic(name, **changes),
        actor=actor,
        request=request,
        action="topic.update",
        object_type="topic",
        object_id=name,
        reason=reason,
        before=lambda: _config_dict(node_ops().get_topic(name)),
        after=_config_dict,
    )
    sync_topics(force=True)
    return cfg


def delete_topic(*, actor: Any, name: str, reason: str, request: Any = None) -> None:
    """Delete a topic and its consume queues (admin)."""
    audited(
        lambda: node_ops().delete_topic(name),
        actor=actor,
        request=request,
        action="topic.delete",
        object_type="topic",
        object_id=name,
        reason=reason,
        before=lambda: _config_dict(node_ops().get_topic(name)),
    )
    sync_topics(force=True)


def get_topic(name: str) -> Any:
    """The topic's settings from the node; ``TopicNotFoundError`` (404
    ``topic_not_found``) when it has no such topic."""
    return node_ops().get_topic(name)


def queue_ranges(name: str) -> list[dict[str, int]]:
    """Return each queue's min and max offset, straight from the store."""
    return node_ops().queue_ranges(name)
