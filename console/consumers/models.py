"""Consumer offsets as the console sees them: a table kept in step with the
store's ``consumerOffset.json`` and queue depths (see docs/console.md)."""

from __future__ import annotations

from django.db import models

from console.cluster.scope import NodeScopedManager


class ConsumerQueue(models.Model):
    """One consumer group's position on one queue of one topic."""

    #: whose store ("" the console's own; ``Topic.node``)
    node = models.CharField(max_length=128, default="", blank=True)
    group = models.CharField(max_length=255, db_index=True)
    topic = models.CharField(max_length=255, db_index=True)
    queue_id = models.PositiveIntegerField()
    #: The next offset the group will consume (RocketMQ's committed offset).
    committed_offset = models.BigIntegerField()
    max_offset = models.BigIntegerField()
    lag = models.BigIntegerField(db_index=True)
    synced_at = models.DateTimeField()

    objects = NodeScopedManager()
    every_node = models.Manager()

    class Meta:
        ordering = ["group", "topic", "queue_id"]
        constraints = [
            models.UniqueConstraint(
                fields=["node", "group", "topic", "queue_id"],
                name="consumer_queue_node_unique",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.group} {self.topic}[{self.queue_id}]"
