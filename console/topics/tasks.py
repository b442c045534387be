"""Celery tasks of the topics app: keep the topic and offset tables in step.

Beat runs ``topics.sync`` every few seconds so rates and charts have samples
even when no one has a page open (pages also sync when their copy is stale).
"""

from __future__ import annotations

from celery import shared_task


@shared_task(name="topics.sync", ignore_result=True)
def sync_store_tables() -> dict[str, int]:
    """Copy topics, depths and consumer offsets from the store; return counts."""
    from console.consumers.services import sync_offsets
    from console.topics.services import sync_topics

    return {"topics": sync_topics(force=True), "offsets": sync_offsets(force=True)}
