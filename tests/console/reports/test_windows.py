"""Scheduled runs over rolling windows, each compared with the previous run
over the same window (real Spark, the Celery task called as beat calls it)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from broker_core import Broker, Message
from console.reports.catalog import WINDOWS, window_bounds

NOW = datetime(2026, 11, 24, 15, 42, 7, tzinfo=UTC)


@pytest.mark.parametrize(
    ("key", "since", "until"),
    [
        ("all", None, None),
        ("1h", datetime(2026, 11, 24, 14, 42, 7, tzinfo=UTC), NOW),
        ("24h", datetime(2026, 11, 23, 15, 42, 7, tzinfo=UTC), NOW),
        ("7d", datetime(2026, 11, 17, 15, 42, 7, tzinfo=UTC), NOW),
        ("prev_hour", datetime(2026, 11, 24, 14, tzinfo=UTC),
         datetime(2026, 11, 24, 15, tzinfo=UTC)),
        ("yesterday", datetime(2026, 11, 23, tzinfo=UTC),
         datetime(2026, 11, 24, tzinfo=UTC)),
    ],
)  # fmt: skip
def test_window_bounds(key, since, until) -> None:
    assert key in WINDOWS
    assert window_bounds(key, NOW) == (since, until)


def _store(settings, tmp_path, messages: list[Message]):
    """A store holding ``messages``, made the console's."""
    store = tmp_path / "store"
    with Broker.open(str(store)) as broker:
        broker.send_batch(messages)
    settings.BROKER_STORE_DIR = store
    settings.BROKER_STORE_OPTIONS = {}
    settings.REPORTS_DIR = tmp_path / "reports"
    return store


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.django_db
def test_scheduled_runs_cover_their_window_and_compare(spark, settings, tmp_path):
    from console.reports.tasks import run_report_task

    store = _store(settings, tmp_path, [Message("w", b"x") for _ in range(40)])

    from console.reports.models import ReportRun

    yesterday = ReportRun.objects.get(
        pk=run_report_task(name="topic_traffic", window="yesterday")["run"]
    )
    assert yesterday.status == "SUCCEEDED", yesterday.error
    assert yesterday.summary["messages"] == 0  # nothing was stored yesterday
    assert yesterday.window == "yesterday" and yesterday.until is not None

    day = ReportRun.objects.get(
        pk=run_report_task(name="topic_traffic", window="24h")["run"]
    )
    assert day.summary["messages"] == 40
    assert "change_vs_previous_run" not in day.summary  # the first over 24 h
    with Broker.open(str(store)) as broker:
        for _ in range(5):
            broker.send(Message("w", b"x"))
    again = ReportRun.objects.get(
        pk=run_report_task(name="topic_traffic", window="24h")["run"]
    )
    change = again.summary["change_vs_previous_run"]
    assert change["run"] == day.pk and change["changes"]["messages"] == 5


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.django_db
def test_top_n_is_a_run_parameter(spark, settings, tmp_path):
    from console.reports.models import ReportRun
    from console.reports.tasks import run_report_task

    _store(
        settings,
        tmp_path,
        [Message("tagged", b"x", tags=f"t{i % 5}") for i in range(50)],
    )
    default = ReportRun.objects.get(pk=run_report_task(name="topic_traffic")["run"])
    two = ReportRun.objects.get(
        pk=run_report_task(name="topic_traffic", top_n=2)["run"]
    )
    assert default.rows["top_tags"] == 5 and two.rows["top_tags"] == 2
    assert two.top_n == 2


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.django_db
def test_a_threshold_alert_announces_a_figure_above_it(
    spark, settings, tmp_path, mailoutbox
):
    from console.reports.tasks import run_report_task

    _store(settings, tmp_path, [Message("w", b"x") for _ in range(40)])
    settings.REPORTS_ALERT_EMAILS = ["analyst@example.com"]
    quiet = run_report_task(
        name="topic_traffic", alert={"figure": "messages", "above": 100}
    )
    assert quiet["status"] == "SUCCEEDED" and mailoutbox == []
    loud = run_report_task(
        name="topic_traffic", alert={"figure": "messages", "above": 30}
    )
    (mail,) = mailoutbox
    assert f"run #{loud['run']}" in mail.body
    assert "messages = 40 (above 30" in mail.subject
