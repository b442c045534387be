"""Run history of the Spark reports (results themselves are Parquet files).

Schedules are django-celery-beat ``PeriodicTask`` rows (one per report, task
``reports.run_report``), so beat picks up edits made in the console.
"""

from __future__ import annotations

from typing import Any

from django.db import models


class ReportRun(models.Model):
    class Status(models.TextChoices):
        QUEUED = "QUEUED"
        RUNNING = "RUNNING"
        SUCCEEDED = "SUCCEEDED"
        FAILED = "FAILED"

    class Trigger(models.TextChoices):
        MANUAL = "manual"  # "run now" in the console or the API
        SCHEDULE = "schedule"  # celery beat
        COMMAND = "command"  # manage.py run_report

    report = models.CharField(max_length=64, db_index=True)
    status = models.CharField(
        max_length=16, choices=Status.choices, default=Status.QUEUED
    )
    trigger = models.CharField(max_length=16, choices=Trigger.choices)
    requested_by = models.CharField(max_length=150, blank=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    duration_s = models.FloatField(null=True, blank=True)
    # Input range: the time window asked for and the log bytes read.
    since = models.DateTimeField(null=True, blank=True)
    until = models.DateTimeField(null=True, blank=True)
    #: Report on the rest when the log has damaged records (else the run fails).
    skip_damaged = models.BooleanField(default=False)
    #: A scheduled run's rolling window (``catalog.WINDOWS``); "" for others.
    window = models.CharField(max_length=16, blank=True)
    #: The cluster node the run covers; "" for every node (or a single host).
    node = models.CharField(max_length=64, blank=True)
    #: How many rows the top-N tables keep (None: each report's default).
    top_n = models.PositiveIntegerField(null=True, blank=True)
    #: The report's own parameters given to this run (``catalog.Param``:
    #: thresholds); the report's defaults apply to the others.
    params = models.JSONField(default=dict, blank=True)
    #: A schedule's threshold alert: summary figure and the value it must not pass.
    alert_figure = models.CharField(max_length=64, blank=True)
    alert_above = models.FloatField(null=True, blank=True)
    log_end = models.BigIntegerField(null=True, blank=True)
    input_records = models.BigIntegerField(null=True, blank=True)
    rows = models.JSONField(default=dict, blank=True)  # table -> rows
    result_dir = models.CharField(max_length=500, blank=True)
    summary = models.JSONField(default=dict, blank=True)
    error = models.TextField(blank=True)
    #: ``host:pid`` of the process running it (the reaper checks it is alive).
    worker = models.CharField(max_length=255, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["report", "status", "-created_at"])]

    def __str__(self) -> str:
        return f"{self.report} #{self.pk} {self.status}"

    @property
    def window_label(self) -> str:
        from console.reports.catalog import WINDOWS

        return WINDOWS.get(self.window, self.window)

    @property
    def labelled_params(self) -> list[tuple[str, Any]]:
        """The run's thresholds as the forms name them ("Stuck after (s)",
        60), Top N first; unknown names as they are."""
        from console.reports.catalog import REPORTS

        info = REPORTS.get(self.report)
        labels = {p.name: p.label for p in info.params} if info else {}
        out: list[tuple[str, Any]] = []
        if self.top_n:
            out.append(("Top", self.top_n))
        out += [(labels.get(k, k), v) for k, v in (self.params or {}).items()]
        return out

    @property
    def total_rows(self) -> int:
        """Rows of the result tables, per-message detail tables left out (a
        sum of summary rows and one row per message means nothing)."""
        from console.reports.catalog import REPORTS

        info = REPORTS.get(self.report)
        detail = set(info.detail_tables) if info else set()
        return sum(int(v) for k, v in (self.rows or {}).items() if k not in detail)
