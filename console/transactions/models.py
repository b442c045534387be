"""Samples of the transaction counters, for the overview's rates and charts.

The halves themselves stay in broker_core's pending-transaction index (derived
from the log, queried in SQL there); only these periodic counter snapshots are
kept here, as the index keeps totals and no history.
"""

from __future__ import annotations

from django.db import models


class TransactionSample(models.Model):
    at = models.DateTimeField(db_index=True)
    pending = models.BigIntegerField()
    discarded = models.BigIntegerField()
    commits = models.BigIntegerField()
    rollbacks = models.BigIntegerField()
    discards = models.BigIntegerField()
    checks_sent = models.BigIntegerField()
    checks_answered = models.BigIntegerField()
    checks_failed = models.BigIntegerField()

    class Meta:
        ordering = ["at"]
