"""Celery tasks: run a report (queued or scheduled), keep the export current."""

from __future__ import annotations

from typing import Any

from celery import shared_task
from django.conf import settings

from console.reports import services


@shared_task(
    name="reports.run_report",
    soft_time_limit=settings.REPORTS_TIME_LIMIT,
    time_limit=settings.REPORTS_TIME_LIMIT + 60,
)
def run_report_task(
    run_id: int | None = None,
    name: str | None = None,
    window: str = "all",
    top_n: int | None = None,
    alert: dict[str, Any] | None = None,
    node: str = "",
    params: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Execute a queued run, or (from beat, by ``name``) a new scheduled run
    over its rolling ``window`` (and one ``node``, if named) with the
    schedule's report ``params``."""
    if run_id is None:
        run_id = services.scheduled_run(
            name or "", window, top_n, alert, node, params
        ).pk
    run = services.execute_run(run_id)
    return {"run": run.pk, "status": run.status, "rows": run.rows}


@shared_task(name="reports.export")
def export_task(node: str | None = None) -> dict[str, Any]:
    """Decode the log bytes appended since the last export into Parquet (on a
    cluster, ``node``'s: skipped on another node's worker or on a slave)."""
    from console.core.nodes import skip_reason

    reason = skip_reason(node) if node else None
    if reason:
        return {"skipped": reason}
    return services.export_now()


@shared_task(name="reports.reap", ignore_result=True)
def reap_task() -> dict[str, int]:
    """Fail runs that can no longer finish (their worker died or timed out)."""
    return services.reap_runs()
