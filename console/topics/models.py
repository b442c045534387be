"""Topics as the console sees them: a table kept in step with the store.

The store's ``config/topics.json`` and consume queues stay the source of
truth; ``services.sync_topics`` copies names, settings and depths here (and a
depth sample for rates and charts) so that lists filter, sort and paginate
in SQL, and the page, the API and Django admin share one model. Messages are
never copied: they are read from the store on demand.
"""

from __future__ import annotations

from django.db import models

from console.cluster.scope import NodeScopedManager


class Topic(models.Model):
    #: whose store: "" the console's own, else the cluster node picked
    #: (``console.cluster.picker``); ``objects`` shows the current one's
    node = models.CharField(max_length=128, default="", blank=True)
    name = models.CharField(max_length=127)
    read_queue_nums = models.PositiveIntegerField()
    write_queue_nums = models.PositiveIntegerField()
    perm = models.PositiveSmallIntegerField()
    message_type = models.CharField(max_length=16, db_index=True)
    #: Internal topics (half messages, schedule, retry, dead letter).
    system = models.BooleanField(default=False, db_index=True)
    queues = models.PositiveIntegerField()
    #: Messages written so far: the sum of the queues' max offsets.
    messages = models.BigIntegerField(default=0, db_index=True)
    #: Messages per minute over the last sampling window.
    produce_rate = models.FloatField(default=0.0)
    depths = models.JSONField(default=list)
    synced_at = models.DateTimeField()

    objects = NodeScopedManager()
    every_node = models.Manager()

    class Meta:
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(fields=["node", "name"], name="topic_node_name")
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def perm_text(self) -> str:
        return ("R" if self.perm & 0x4 else "-") + ("W" if self.perm & 0x2 else "-")


class TopicSample(models.Model):
    """A topic's message count at one moment; rates and charts come from these."""

    node = models.CharField(max_length=128, default="", blank=True)
    topic = models.CharField(max_length=127)
    at = models.DateTimeField(db_index=True)
    messages = models.BigIntegerField()

    objects = NodeScopedManager()
    every_node = models.Manager()

    class Meta:
        indexes = [models.Index(fields=["node", "topic", "-at"])]
