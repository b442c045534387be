"""Report pages, run now, schedules, CSV and the API, with a real Spark run."""

from __future__ import annotations

import csv
import io
import json

import pytest

from broker_core import Broker, Message

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.django_db]


@pytest.fixture
def store(settings, tmp_path):
    path = tmp_path / "store"
    with Broker.open(str(path)) as broker:
        for i in range(50):
            broker.send(Message(("a", "b")[i % 2], b"xyz", tags=f"t{i % 3}"))
    settings.BROKER_STORE_DIR = path
    settings.BROKER_STORE_OPTIONS = {}
    settings.REPORTS_DIR = tmp_path / "reports"
    return path


@pytest.fixture
def eager():
    """Run queued Celery tasks in the request, as a worker would."""
    from console.celery import app

    old = app.conf.task_always_eager
    app.conf.task_always_eager = True
    yield
    app.conf.task_always_eager = old


def test_run_now_then_page_csv_and_api(spark, store, client_as, api_as, eager):
    from console.audit.models import AuditRecord
    from console.reports.models import ReportRun

    viewer, operator = client_as("viewer"), client_as("operator")
    assert viewer.post("/reports/topic_traffic/run/").status_code == 403
    resp = operator.post("/reports/topic_traffic/run/", follow=True)
    assert resp.status_code == 200
    run = ReportRun.objects.get()
    assert run.status == ReportRun.Status.SUCCEEDED, run.error
    assert run.trigger == "manual" and run.requested_by == "operator"
    assert AuditRecord.objects.filter(action="report.run").count() == 1

    page = viewer.get("/reports/topic_traffic/")
    text = page.content.decode()
    assert page.status_code == 200
    assert 'data-testid="table-hourly"' in text and "chart-data" in text
    assert "&quot;messages&quot;: 50" in text
    # The summary as labelled figures (the JSON stays, folded away).
    assert '<dt class="depth-0">Messages</dt><dd>50</dd>' in text
    # The hourly chart (a series per topic) adds up to every message sent.
    charts = json.loads(text.split('id="chart-data" type="application/json">')[1]
                        .split("</script>")[0])  # fmt: skip
    (traffic,) = [c for c in charts if c["title"] == "Messages per hour"]
    assert sum(v for d in traffic["datasets"] for v in d["data"]) == 50
    assert sorted(d["label"] for d in traffic["datasets"]) == ["a", "b"]

    listing = viewer.get("/reports/").content.decode()
    assert f"?run={run.pk}" in listing  # the overview of reports links the latest

    resp = viewer.get(f"/reports/topic_traffic/runs/{run.pk}/top_tags.csv")
    rows = list(csv.reader(io.StringIO(b"".join(resp.streaming_content).decode())))
    assert rows[0] == ["topic", "rank", "tag", "messages"]
    assert sum(int(r[3]) for r in rows[1:]) == 50
    assert (
        viewer.get(f"/reports/topic_traffic/runs/{run.pk}/nope.csv").status_code == 404
    )
    # The same table as JSON lines and as Parquet, with the same figures.
    resp = viewer.get(f"/reports/topic_traffic/runs/{run.pk}/top_tags.jsonl")
    lines = b"".join(resp.streaming_content).decode().splitlines()
    objs = [json.loads(x) for x in lines]
    assert set(objs[0]) == {"topic", "rank", "tag", "messages"}
    assert sum(o["messages"] for o in objs) == 50
    resp = viewer.get(f"/reports/topic_traffic/runs/{run.pk}/top_tags.parquet")
    assert resp["Content-Disposition"].endswith('top_tags.parquet"')
    import pyarrow.parquet as pq

    table = pq.read_table(io.BytesIO(resp.content))
    assert table.column_names == ["topic", "rank", "tag", "messages"]
    assert sum(table.column("messages").to_pylist()) == 50

    api = api_as("viewer")
    latest = {r["name"]: r["latest"] for r in api.get("/api/reports/").json()}
    assert latest["topic_traffic"]["summary"]["messages"] == 50
    assert latest["consumer_lag"] is None
    assert api.get("/api/report-runs/?report=topic_traffic").json()["count"] == 1
    assert api.post("/api/reports/topic_traffic/run/").status_code == 403
    resp = api_as("operator").post(
        "/api/reports/topic_traffic/run/",
        {"until": "2000-01-01T00:00:00Z"},
        format="json",
    )
    assert resp.status_code == 202
    assert ReportRun.objects.get(pk=resp.json()["id"]).summary["messages"] == 0


def test_failed_run_is_recorded(spark, settings, tmp_path, client_as, eager):
    from console.reports.models import ReportRun

    settings.REPORTS_DIR = tmp_path / "reports"
    settings.BROKER_STORE_DIR = tmp_path / "missing"
    (tmp_path / "reports").mkdir()
    (tmp_path / "reports" / "export").write_text("not a directory")
    client_as("operator").post("/reports/consumer_lag/run/")
    run = ReportRun.objects.get()
    assert run.status == ReportRun.Status.FAILED
    assert run.error and run.finished_at is not None
    page = client_as("viewer").get("/reports/consumer_lag/").content.decode()
    assert "FAILED" in page


def test_schedule_edit(db, client_as):
    from django_celery_beat.models import PeriodicTask

    assert client_as("viewer").get("/reports/").status_code == 200
    task = PeriodicTask.objects.get(name="report: delay_punctuality")
    assert not task.enabled and task.task == "reports.run_report"
    assert json.loads(task.kwargs) == {"name": "delay_punctuality"}
    denied = client_as("viewer").post(
        "/reports/delay_punctuality/schedule/", {"enabled": "on", "every_minutes": 15}
    )
    assert denied.status_code == 403
    client_as("operator").post(
        "/reports/delay_punctuality/schedule/", {"enabled": "on", "every_minutes": 15}
    )
    task.refresh_from_db()
    assert task.enabled and task.interval.every == 15
    assert task.interval.period == "minutes"
    assert json.loads(task.kwargs) == {"name": "delay_punctuality", "window": "all"}
    # A rolling window: beat passes it to the task, each run computes its bounds.
    client_as("operator").post(
        "/reports/delay_punctuality/schedule/",
        {"enabled": "on", "every_minutes": 60, "window": "24h"},
    )
    task.refresh_from_db()
    assert json.loads(task.kwargs)["window"] == "24h"
    page = client_as("viewer").get("/reports/delay_punctuality/").content.decode()
    assert "each run over the last 24 hours" in page
    client_as("operator").post(
        "/reports/delay_punctuality/schedule/",
        {"enabled": "on", "every_minutes": 60, "window": "1h",
         "alert_figure": "max_lag_ms", "alert_above": "500"},
    )  # fmt: skip
    task.refresh_from_db()
    assert json.loads(task.kwargs)["alert"] == {"figure": "max_lag_ms", "above": 500.0}
