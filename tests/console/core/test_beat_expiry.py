"""Stale ticks expire: every periodic task beat sends carries an expiry of one
interval, through the scheduler the console runs (django-celery-beat's
``DatabaseScheduler``, which keeps only ``expire_seconds`` of an entry's
options: an ``expires`` option was silently dropped, and a worker outage left
hundreds of stale ticks to run late)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.django_db(transaction=True)

TIMED = {
    "beat-heartbeat": "BEAT_HEARTBEAT_INTERVAL",
    "delays-deliver-due": "DELAY_TICK_INTERVAL",
    "transactions-run-check": "TRANSACTION_CHECK_INTERVAL",
    "topics-sync": "TOPICS_SYNC_INTERVAL",
    "reports-reap": "REPORTS_REAP_INTERVAL",
    "reports-export": "REPORTS_EXPORT_INTERVAL",
}


def scheduler():
    from django_celery_beat.schedulers import DatabaseScheduler

    from console.celery import app

    return DatabaseScheduler(app=app)


def test_every_periodic_task_expires_after_one_interval(settings) -> None:
    from django_celery_beat.models import PeriodicTask

    entries = scheduler().schedule
    for name, setting in TIMED.items():
        every = getattr(settings, setting)
        row = PeriodicTask.objects.get(name=name)
        assert row.expire_seconds == every, name
        # apply_async(expires=<seconds>): each message expires one interval
        # after beat sent it.
        assert entries[name].options.get("expires") == every, entries[name].options


def test_rows_saved_without_an_expiry_get_one_when_beat_starts(settings) -> None:
    from django_celery_beat.models import PeriodicTask

    scheduler()
    PeriodicTask.objects.filter(name__in=TIMED).update(expire_seconds=None)
    entries = scheduler().schedule  # what a beat restart does
    assert PeriodicTask.objects.get(name="delays-deliver-due").expire_seconds == (
        settings.DELAY_TICK_INTERVAL
    )
    assert entries["transactions-run-check"].options.get("expires") is not None


def test_the_minute_sample_runs_at_each_minute_s_start() -> None:
    """The transaction sampler's second entry is a crontab at every minute's
    start (its sample bounds the overview's per-minute counts), as the
    DatabaseScheduler keeps it."""
    from django_celery_beat.models import PeriodicTask

    scheduler()
    row = PeriodicTask.objects.get(name="transactions-sample-minute")
    assert row.task == "transactions.sample"
    assert row.crontab is not None and row.crontab.minute == "*"
    assert row.crontab.hour == "*" and row.expire_seconds == 10
