"""Traffic produced with broker_core, reports run through the console's service
in a real local SparkSession, numbers checked against what was produced."""

from __future__ import annotations

import json

import pytest

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.django_db]


@pytest.fixture
def store(produced, settings, tmp_path):
    path, opts, facts = produced
    settings.BROKER_STORE_DIR = path
    settings.BROKER_STORE_OPTIONS = opts
    settings.REPORTS_DIR = tmp_path / "reports"
    return facts


def test_all_reports_match_the_traffic(spark, store):
    from console.reports import results as report_results
    from console.reports import services
    from console.reports.models import ReportRun

    facts = store
    runs = {
        name: services.run_now(name)
        for name in (
            "topic_traffic",
            "transaction_outcomes",
            "delay_punctuality",
            "consumer_lag",
        )
    }
    for run in runs.values():
        assert run.status == ReportRun.Status.SUCCEEDED, run.error

    traffic = runs["topic_traffic"]
    assert traffic.summary["messages"] == sum(facts["messages"].values())
    assert traffic.summary["bytes"] == sum(facts["bytes"].values())
    assert traffic.summary["topics"] == len(facts["messages"])
    _, rows = report_results.read_table(traffic, "top_tags", limit=1000)
    got_tags = {(r[0], r[2]): r[3] for r in rows}
    assert got_tags == dict(facts["tags"])

    tx = runs["transaction_outcomes"].summary
    assert tx["halves"] == 7
    assert tx["states"] == {
        "COMMITTED": 4,
        "ROLLED_BACK": 2,
        "PENDING": 1,
        "DISCARDED": 0,
    }
    assert tx["decided_by"] == {"CLIENT": 5, "OPERATOR": 1}
    _, checks = report_results.read_table(runs["transaction_outcomes"], "check_counts")
    assert [(r[1], r[2]) for r in checks] == [(0, 6), (1, 1)]

    delay = runs["delay_punctuality"].summary
    assert delay["scheduled"] == 6
    assert delay["delivered"] == 5
    assert delay["recalled"] == 1
    assert delay["early"] == 0
    assert 0 <= delay["lag_ms_p50"] <= delay["lag_ms_max"] < 60_000

    lag = runs["consumer_lag"].summary
    assert lag["lag"] == facts["lag"]
    assert lag["most_behind"][0]["group"] == "billing"

    # The runs are in the history, with their input range and result files.
    run = ReportRun.objects.get(pk=traffic.pk)
    assert run.input_records and run.input_records > 600
    assert run.log_end and run.duration_s > 0


def test_run_report_command_prints_summary(spark, store, capsys):
    from django.core.management import call_command

    call_command("run_report", "topic_traffic", "--since", "2000-01-01T00:00:00")
    out = json.loads(capsys.readouterr().out)
    assert out["status"] == "SUCCEEDED"
    assert out["summary"]["messages"] == sum(store["messages"].values())
    call_command("run_report", "topic_traffic", "--until", "2000-01-01T00:00:00")
    assert json.loads(capsys.readouterr().out)["summary"]["messages"] == 0
    # All four in one process (one warm session); JSON only on stdout.
    call_command("run_report", "--all")
    runs = json.loads(capsys.readouterr().out)
    assert [r["report"] for r in runs] == [
        "transaction_outcomes", "delay_punctuality", "topic_traffic", "consumer_lag"
    ]  # fmt: skip
    assert {r["status"] for r in runs} == {"SUCCEEDED"}
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match="no report nope"):
        call_command("run_report", "nope")
