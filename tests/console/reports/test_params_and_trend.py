"""Report parameters (thresholds) on run-now, schedules, the API and the
command; each run's change against the previous period; the trend across
runs on the report's page. Real Spark, real stores."""

from __future__ import annotations

import json
import time
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.utils import timezone

from broker_core import Broker, Message
from broker_core.schedule import DelayService
from console.reports.catalog import ParamError, check_params

from .test_views import eager  # noqa: F401  (a fixture)


def test_check_params() -> None:
    assert check_params(["delay_punctuality"], {"late_after_ms": "250"}) == {
        "late_after_ms": 250
    }
    assert check_params(["consumer_lag"], {"behind_after": None}) == {}
    with pytest.raises(ParamError, match="unknown parameter 'late_after_ms'"):
        check_params(["consumer_lag"], {"late_after_ms": 1})
    with pytest.raises(ParamError, match="whole number"):
        check_params(["delay_punctuality"], {"late_after_ms": "soon"})
    with pytest.raises(ParamError, match="whole number"):
        check_params(["delay_punctuality"], {"late_after_ms": 2.5})
    with pytest.raises(ParamError, match="between 1 and"):
        check_params(["transaction_outcomes"], {"stuck_after_s": 0})
    # --all: each name must be known to one of the reports.
    assert check_params(
        ["delay_punctuality", "consumer_lag"], {"late_after_ms": 1, "behind_after": 2}
    ) == {"late_after_ms": 1, "behind_after": 2}


def _store(settings, tmp_path):
    path = tmp_path / "store"
    settings.BROKER_STORE_DIR = path
    settings.BROKER_STORE_OPTIONS = {}
    settings.REPORTS_DIR = tmp_path / "reports"
    return path


def _send(path, n: int) -> None:
    with Broker.open(str(path)) as broker:
        broker.send_batch([Message("p", b"x") for _ in range(n)])


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.django_db
def test_a_run_over_dates_is_compared_with_the_period_before(spark, settings, tmp_path):
    from console.reports import services

    path = _store(settings, tmp_path)
    start = timezone.now() - timedelta(milliseconds=5)
    _send(path, 3)
    time.sleep(0.3)
    middle = timezone.now()
    time.sleep(0.3)
    _send(path, 5)
    length = (timezone.now() - start) * 2  # the period before reaches past start

    run = services.run_now("topic_traffic", since=middle, until=middle + length)
    assert run.status == "SUCCEEDED", run.error
    assert run.summary["messages"] == 5
    period = run.summary["change_vs_previous_period"]
    assert period["since"] == (middle - length).isoformat()
    assert period["until"] == middle.isoformat()
    assert "run" not in period  # computed within the run
    assert period["changes"]["messages"] == 5 - 3

    # A run that covered exactly the period before is used instead.
    before = services.run_now("topic_traffic", since=middle - length, until=middle)
    assert before.summary["messages"] == 3
    again = services.run_now("topic_traffic", since=middle, until=middle + length)
    period = again.summary["change_vs_previous_period"]
    assert period["run"] == before.pk and period["changes"]["messages"] == 2
    # Runs over dates of their own have no "previous run" over the whole log.
    assert "change_vs_previous_run" not in again.summary


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.django_db
def test_parameters_reach_the_report_and_split_comparisons(
    spark,
    settings,
    tmp_path,
    client_as,
    api_as,
    eager,  # noqa: F811
):
    from console.audit.models import AuditRecord
    from console.reports.models import ReportRun

    path = _store(settings, tmp_path)
    with Broker.open(str(path)) as broker:
        delays = DelayService(broker)  # parks the delayed sends
        for level in (1, 1, 2):
            broker.send(Message("d", b"x", properties={"DELAY": str(level)}))
        delays.close()
    _send(path, 1)

    operator = client_as("operator")
    page = operator.get("/reports/delay_punctuality/").content.decode()
    assert "Late after (ms)" in page and 'name="param_late_after_ms"' in page
    operator.post("/reports/delay_punctuality/run/", {"param_late_after_ms": "250"})
    run = ReportRun.objects.get()
    assert run.status == "SUCCEEDED", run.error
    assert run.params == {"late_after_ms": 250}
    assert run.summary["scheduled"] == 3 and "late" in run.summary
    audit = AuditRecord.objects.get(action="report.run")
    assert audit.after["params"] == {"late_after_ms": 250}
    page = operator.get("/reports/delay_punctuality/").content.decode()
    assert "late_after_ms 250" in page  # the run's header names its parameters

    # A form value out of range starts nothing.
    operator.post("/reports/delay_punctuality/run/", {"param_late_after_ms": "-1"})
    assert ReportRun.objects.count() == 1

    api = api_as("operator")
    bad = api.post(
        "/api/reports/delay_punctuality/run/",
        {"params": {"behind_after": 3}},
        format="json",
    )
    assert bad.status_code == 400
    assert "unknown parameter 'behind_after'" in json.dumps(bad.json())
    ok = api.post(
        "/api/reports/delay_punctuality/run/",
        {"params": {"late_after_ms": 250}},
        format="json",
    )
    assert ok.status_code == 202 and ok.json()["params"] == {"late_after_ms": 250}
    second = ReportRun.objects.get(pk=ok.json()["id"])
    # Same parameters: compared with the first run over the whole log.
    assert second.summary["change_vs_previous_run"]["run"] == run.pk
    third = api.post("/api/reports/delay_punctuality/run/", {}, format="json")
    third = ReportRun.objects.get(pk=third.json()["id"])
    assert third.params == {}
    # Other thresholds give other figures: no comparison across them.
    assert "change_vs_previous_run" not in third.summary

    # The trend: this run and the one before it with the same parameters.
    page = operator.get(f"/reports/delay_punctuality/?run={second.pk}")
    text = page.content.decode()
    assert 'data-testid="trend"' in text
    trend = text.split('data-testid="trend"')[1].split("</section>")[0]
    assert f"#{run.pk}" in trend and f"#{second.pk}" in trend
    assert f"#{third.pk}" not in trend
    assert ">scheduled</th>" in trend

    # Schedules keep their parameters and hand them to beat's task.
    operator.post(
        "/reports/delay_punctuality/schedule/",
        {"enabled": "on", "every_minutes": 30, "param_late_after_ms": "40"},
    )
    from django_celery_beat.models import PeriodicTask

    task = PeriodicTask.objects.get(name="report: delay_punctuality")
    kwargs = json.loads(task.kwargs)
    assert kwargs["params"] == {"late_after_ms": 40}
    from console.reports.tasks import run_report_task

    scheduled = ReportRun.objects.get(pk=run_report_task(**kwargs)["run"])
    assert scheduled.params == {"late_after_ms": 40}
    page = operator.get("/reports/delay_punctuality/").content.decode()
    assert 'name="param_late_after_ms" value="40"' in page


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.django_db
def test_run_report_command_takes_parameters(spark, settings, tmp_path, capsys):
    from django.core.management.base import CommandError

    path = _store(settings, tmp_path)
    _send(path, 2)
    with pytest.raises(CommandError, match="unknown parameter 'nope'"):
        call_command("run_report", "consumer_lag", "--param", "nope=1")
    with pytest.raises(CommandError, match="NAME=VALUE"):
        call_command("run_report", "consumer_lag", "--param", "behind_after")
    capsys.readouterr()
    call_command(
        "run_report",
        "consumer_lag",
        "topic_traffic",
        "--param",
        "behind_after=7",
    )
    outs = {o["report"]: o for o in json.loads(capsys.readouterr().out)}
    assert outs["consumer_lag"]["params"] == {"behind_after": 7}
    assert outs["topic_traffic"]["params"] == {}  # it takes none
    assert outs["consumer_lag"]["status"] == "SUCCEEDED"


def test_changes_show_their_sign() -> None:
    from console.reports.views import figures

    shown = figures(
        {
            "messages": 12,
            "change_vs_previous_period": {
                "since": "2026-11-24T00:00:00+00:00",
                "changes": {"messages": 5, "late": -2, "lag_ms_p50": 1.25, "x": 0},
            },
        }
    )
    values = {f["label"]: f["value"] for f in shown}
    assert values["messages"] == "+5" and values["late"] == "-2"
    assert values["lag_ms_p50"] == "+1.25" and values["x"] == "0"
    assert values["Messages"] == 12
