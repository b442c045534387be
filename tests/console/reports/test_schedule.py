"""Beat keeps the reports' Parquet export current."""

from __future__ import annotations


def test_beat_runs_the_export_task_with_an_expiry(settings):
    from console.celery import app

    app.loader.import_default_modules()  # what a worker does at start

    entry = settings.CELERY_BEAT_SCHEDULE["reports-export"]
    assert entry["task"] == "reports.export"
    assert entry["task"] in app.tasks
    assert entry["schedule"].total_seconds() == settings.REPORTS_EXPORT_INTERVAL
    assert entry["options"]["expire_seconds"] == settings.REPORTS_EXPORT_INTERVAL
