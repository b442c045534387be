"""Report parameters (thresholds) on run-now, schedules, the API and the
command; each run's change against the previous period; the trend across
runs on the report's page. Real Spark, real stores."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta

import pytest
from django.core.management import call_command
from django.utils import timezone

from broker_core import Broker, Message
from broker_core.schedule import DelayService
from console.reports.catalog import REPORTS, ParamError, check_params

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


def _delays_delivered(path) -> None:
    """Three level-1 (1 s) messages parked, then delivered a few hundred ms
    after they fell due: every lag is between 0 and 60 s."""
    with Broker.open(str(path)) as broker:
        delays = DelayService(broker)
        for _ in range(3):
            broker.send(Message("d", b"x", properties={"DELAY": "1"}))
        time.sleep(1.3)
        assert delays.deliver_due().delivered == 3
        delays.close()


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

    _delays_delivered(_store(settings, tmp_path))
    api = api_as("operator")
    # An older run with another threshold: never compared with the others.
    other = api.post(
        "/api/reports/delay_punctuality/run/",
        {"params": {"late_after_ms": 60_000}},
        format="json",
    )
    other = ReportRun.objects.get(pk=other.json()["id"])
    assert other.summary["delivered"] == 3 and other.summary["late"] == 0

    operator = client_as("operator")
    page = operator.get("/reports/delay_punctuality/").content.decode()
    assert "Late after (ms)" in page and 'name="param_late_after_ms"' in page
    operator.post("/reports/delay_punctuality/run/", {"param_late_after_ms": "0"})
    run = ReportRun.objects.latest("pk")
    assert run.status == "SUCCEEDED", run.error
    assert run.params == {"late_after_ms": 0}
    assert run.summary["late"] == 3  # every delivery is later than 0 ms
    assert "change_vs_previous_run" not in run.summary  # only `other` before it
    audit = AuditRecord.objects.get(action="report.run", after__run=run.pk)
    assert audit.after["params"] == {"late_after_ms": 0}
    page = operator.get("/reports/delay_punctuality/").content.decode()
    assert "Late after (ms) 0" in page  # the run's header names its parameters

    # A form value out of range starts nothing.
    operator.post("/reports/delay_punctuality/run/", {"param_late_after_ms": "-1"})
    assert ReportRun.objects.count() == 2

    bad = api.post(
        "/api/reports/delay_punctuality/run/",
        {"params": {"behind_after": 3}},
        format="json",
    )
    assert bad.status_code == 400
    assert "unknown parameter 'behind_after'" in json.dumps(bad.json())
    backwards = api.post(
        "/api/reports/delay_punctuality/run/",
        {"since": "2026-11-25T00:00:00Z", "until": "2026-11-24T00:00:00Z"},
        format="json",
    )
    assert backwards.status_code == 400 and "until" in backwards.json()["fields"]
    ok = api.post(
        "/api/reports/delay_punctuality/run/",
        {"params": {"late_after_ms": 0}},
        format="json",
    )
    assert ok.status_code == 202 and ok.json()["params"] == {"late_after_ms": 0}
    second = ReportRun.objects.get(pk=ok.json()["id"])
    # Same parameters: compared with that run, not with the older `other`.
    assert second.summary["change_vs_previous_run"]["run"] == run.pk
    assert second.summary["change_vs_previous_run"]["changes"]["late"] == 0

    # The trend: this run and the one before it with the same parameters.
    page = operator.get(f"/reports/delay_punctuality/?run={second.pk}")
    trend = page.content.decode().split('data-testid="trend"')[1]
    trend = trend.split("</section>")[0]
    assert f"#{run.pk}" in trend and f"#{second.pk}" in trend
    assert f"#{other.pk}<" not in trend
    assert ">late</th>" in trend
    # The same as JSON.
    data = api_as("viewer").get(f"/api/report-runs/{second.pk}/trend/").json()
    assert [r["run"] for r in data["runs"]] == [run.pk, second.pk]
    assert data["rows"][-1][data["figures"].index("late")] == 3
    assert api.get(f"/api/report-runs/{second.pk + 999}/trend/").status_code == 404

    # Schedules keep their parameters and hand them to beat's task.
    operator.post(
        "/reports/delay_punctuality/schedule/",
        {"enabled": "on", "every_minutes": 30, "param_late_after_ms": "0"},
    )
    from django_celery_beat.models import PeriodicTask

    task = PeriodicTask.objects.get(name="report: delay_punctuality")
    kwargs = json.loads(task.kwargs)
    assert kwargs["params"] == {"late_after_ms": 0}
    from console.reports.tasks import run_report_task

    scheduled = ReportRun.objects.get(pk=run_report_task(**kwargs)["run"])
    assert scheduled.params == {"late_after_ms": 0}
    assert scheduled.summary["late"] == 3
    page = operator.get("/reports/delay_punctuality/").content.decode()
    assert 'name="param_late_after_ms" value="0"' in page


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.django_db
def test_run_report_command_takes_parameters(spark, settings, tmp_path, capsys):
    from django.core.management.base import CommandError

    _delays_delivered(_store(settings, tmp_path))
    with pytest.raises(CommandError, match="unknown parameter 'nope'"):
        call_command("run_report", "consumer_lag", "--param", "nope=1")
    with pytest.raises(CommandError, match="NAME=VALUE"):
        call_command("run_report", "consumer_lag", "--param", "behind_after")
    with pytest.raises(CommandError, match="--since must be before --until"):
        call_command("run_report", "topic_traffic", "--since", "2026-11-25",
                     "--until", "2026-11-24")  # fmt: skip
    capsys.readouterr()
    call_command(
        "run_report",
        "delay_punctuality",
        "topic_traffic",
        "--param",
        "late_after_ms=0",
    )
    outs = {o["report"]: o for o in json.loads(capsys.readouterr().out)}
    assert outs["delay_punctuality"]["params"] == {"late_after_ms": 0}
    assert outs["delay_punctuality"]["summary"]["late"] == 3
    assert outs["topic_traffic"]["params"] == {}  # it takes none


@pytest.mark.django_db
def test_which_earlier_runs_count_as_the_same(db) -> None:
    """The database picks the earlier runs: same parameters (in any order),
    and for the period before a rolling window, bounds within a minute."""
    from console.reports import comparisons
    from console.reports.models import ReportRun

    def run(params, since=None, until=None, window="", **summary):
        return ReportRun.objects.create(
            report="delay_punctuality",
            status="SUCCEEDED",
            trigger="schedule",
            params=check_params(["delay_punctuality"], params),
            since=since,
            until=until,
            window=window,
            summary=summary,
        )

    a = run({"late_after_ms": 5}, scheduled=1)
    run({"late_after_ms": 6}, scheduled=2)
    b = run({}, scheduled=3)
    c = run({"late_after_ms": 5}, scheduled=4)
    assert comparisons.compare_with_previous(c)["run"] == a.pk
    assert comparisons.compare_with_previous(c)["changes"] == {"scheduled": 3}
    assert comparisons.compare_with_previous(b) is None
    now = timezone.now()
    day = timedelta(days=1)
    drifted = run({}, now - 2 * day + timedelta(seconds=20),
                  now - day + timedelta(seconds=20), "24h", late=1)  # fmt: skip
    late = run({}, now - day, now, "24h", late=4)
    assert comparisons._run_over(late, now - 2 * day, now - day) == drifted
    assert comparisons._run_over(late, now - 2 * day - timedelta(minutes=2),
                              now - day) is None  # fmt: skip
    assert [r["run"] for r in comparisons.trend(late)["runs"]] == [drifted.pk, late.pk]
    # Consumer lag is measured against today's offsets: no period before.
    lag = ReportRun(report="consumer_lag", since=now - day, until=now)
    assert comparisons.previous_period(lag) is None
    assert comparisons.previous_period(ReportRun(report="topic_traffic", since=now,
                                              until=now)) is None  # fmt: skip


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


@pytest.mark.django_db
def test_the_list_shows_each_reports_headline_with_its_change(client_as) -> None:
    from console.reports import comparisons
    from console.reports.models import ReportRun

    run = ReportRun.objects.create(
        report="transaction_outcomes",
        status="SUCCEEDED",
        trigger="schedule",
        result_dir="/nowhere",
        window="24h",
        since=datetime(2026, 11, 27, 6, tzinfo=UTC),
        until=datetime(2026, 11, 28, 6, tzinfo=UTC),
        params={"stuck_after_s": 120},
        summary={
            "halves": 9,
            "states": {"PENDING": 4, "COMMITTED": 5},
            "stuck": 2,
            "change_vs_previous_run": {"changes": {"stuck": 3}},
            "change_vs_previous_period": {
                "since": "x",
                "until": "y",
                "changes": {"states.PENDING": -1, "stuck": 1},
            },
        },
    )
    shown = {h["label"]: h for h in comparisons.headline(run)}
    assert list(shown) == ["pending", "stuck", "committed"]
    # The period before wins over the previous run; no change, no "versus".
    assert shown["stuck"] == {
        "label": "stuck",
        "value": 2,
        "change": 1,
        "versus": "the period before",
    }
    assert shown["committed"]["versus"] == ""
    page = client_as("viewer").get("/reports/").content.decode()
    cell = page.split('data-testid="headline-transaction_outcomes">')[1]
    cell = cell.split("</td>")[0]
    assert "pending <strong>4</strong>" in cell and "(-1)" in cell
    assert "stuck <strong>2</strong>" in cell and "(+1)" in cell
    assert comparisons.headline(None) == []
    # Beside the figures: what they are over, with the thresholds labelled.
    scope = page.split('data-testid="scope-transaction_outcomes">')[1]
    scope = scope.split("</span>")[0]
    assert scope == (
        "over the last 24 hours: 2026-11-27 06:00 UTC → 2026-11-28 06:00 UTC; "
        "Stuck after (s) 120"
    )


def test_nested_names_keep_their_case() -> None:
    from console.reports.views import figures

    shown = figures({"busiest_topics": {"TxOrders": 3, "%DLQ%dlq-grp": 1, "LagT": 2}})
    labels = [f["label"] for f in shown]
    assert labels == ["Busiest topics", "TxOrders", "%DLQ%dlq-grp", "LagT"]


def test_consumer_lag_says_its_oldest_message_is_a_snapshot() -> None:
    """consumer_lag's max_lag_ms is the age of the oldest unconsumed message
    when the run read the offsets, not the worst lag over a period: its
    label says so on the report's page and in the list's headline (it read
    "Max lag ms")."""
    from console.reports import comparisons
    from console.reports.models import ReportRun
    from console.reports.views import figures

    summary = {"groups": 2, "groups_behind": 1, "lag": 174, "max_lag_ms": 24_425}
    labels = [
        f["label"] for f in figures(summary, labels=REPORTS["consumer_lag"].labels)
    ]
    assert "Oldest unconsumed message at the run (age, ms)" in labels
    assert "Max lag ms" not in labels
    run = ReportRun(report="consumer_lag", status="SUCCEEDED", summary=summary)
    shown = [h["label"] for h in comparisons.headline(run)]
    assert shown == [
        "lag",
        "groups behind",
        "oldest unconsumed message at the run (age, ms)",
    ]
