"""Reports with the export and the results on an S3-compatible object store,
and on a Spark standalone cluster that shares no disk with the broker host.

The object store is moto's standalone server (``moto[server]`` from PyPI),
started as its own process on a loopback port (``conftest.s3``): the code under
test talks to it over HTTP with pyarrow's S3 client (the AWS C++ SDK, SigV4),
exactly as to AWS S3 or MinIO. It is the S3 server these machines can install from their
registries: MinIO, SeaweedFS and Garage are not packaged for Debian, PyPI or
npm, and Debian's Ceph radosgw needs a whole RADOS cluster.

The cluster is a real Master and two Workers (``bench/spark_cluster.py``)
whose Workers, and so their executors, run in mount namespaces of their own
with empty filesystems over the test's temporary directory (the store, the
local export, the database) and over the project's ``console`` and
``broker_core`` packages: whatever they read, they read from the object store.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.conftest import ROOT

from .conftest import BUCKET

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.django_db]

REPORT_NAMES = ("topic_traffic", "transaction_outcomes", "delay_punctuality",
                "consumer_lag")  # fmt: skip
# Figures that depend on the moment a run computes them (ages, lags in ms
# against "now", halves stuck by then), not on the data.
MOMENT_KEYS = {"oldest_pending_age_ms", "max_lag_ms", "now_ms", "most_behind",
               "change_vs_previous_run", "stuck"}  # fmt: skip
MOMENT_SUFFIXES = ("age_ms", "lag_ms", "now_ms", "stuck")


def _without_moment(value):
    if isinstance(value, dict):
        return {k: _without_moment(v) for k, v in value.items() if k not in MOMENT_KEYS}
    return value


def _tables(run) -> dict[str, list]:
    """Every result table of a run, read as the web reads it, rows sorted."""
    from console.reports import results as report_results

    out = {}
    for table in run.rows:
        data = report_results.read_arrow(run, table)
        moment = [c for c in data.column_names if c.endswith(MOMENT_SUFFIXES)]
        data = data.drop_columns(moment)
        out[table] = sorted(repr({k: _instant(v) for k, v in row.items()})
                            for row in data.to_pylist())  # fmt: skip
    return out


def _instant(value):
    """Times as UTC ISO text: Spark's own writer stores timestamps without a
    zone (INT96, read back as naive UTC), the Arrow writer with UTC."""
    if isinstance(value, datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        return value.astimezone(UTC).isoformat()
    return value


@pytest.fixture(scope="module")
def local(spark, produced, tmp_path_factory, django_db_setup, django_db_blocker):
    """The four reports in local mode, run once for the module: what both
    tests compare their object-store runs with, as plain values (summary
    without the moment's figures, tables, input records). The runs' history
    rows are rolled back at once; their result files stay for the module."""
    from django.db import transaction
    from django.test import override_settings

    from console.reports import services
    from console.reports.models import ReportRun

    path, opts, _ = produced
    out = {}
    with (
        django_db_blocker.unblock(),
        transaction.atomic(),
        override_settings(
            BROKER_STORE_DIR=path,
            BROKER_STORE_OPTIONS=opts,
            REPORTS_DIR=tmp_path_factory.mktemp("local"),
            REPORTS_EXPORT_URI="",
            REPORTS_RESULTS_URI="",
        ),
    ):
        for name in REPORT_NAMES:
            run = services.run_now(name)
            assert run.status == ReportRun.Status.SUCCEEDED, run.error
            out[name] = {
                "summary": _without_moment(run.summary),
                "tables": _tables(run),
                "input_records": run.input_records,
            }
        transaction.set_rollback(True)
    return out


def test_reports_on_the_object_store_equal_local_mode(
    spark, produced, local, s3, settings, tmp_path
):
    from console.reports import services
    from console.reports.models import ReportRun

    path, opts, _ = produced
    settings.BROKER_STORE_DIR = path
    settings.BROKER_STORE_OPTIONS = opts
    settings.REPORTS_DIR = tmp_path / "remote"
    settings.REPORTS_EXPORT_URI = s3.format("t1/export")
    settings.REPORTS_RESULTS_URI = s3.format("t1/results")
    remote = {name: services.run_now(name) for name in REPORT_NAMES}
    for name, run in remote.items():
        assert run.status == ReportRun.Status.SUCCEEDED, run.error
        assert run.result_dir.startswith(f"s3://{BUCKET}/t1/results/{name}/")
        assert _without_moment(run.summary) == local[name]["summary"]
        assert _tables(run) == local[name]["tables"], name
        assert run.input_records == local[name]["input_records"]
    # Nothing of the export or the results was written on this host.
    assert not (tmp_path / "remote").exists() or not any(
        (tmp_path / "remote").rglob("*.parquet")
    )

    # The export on the store is incremental: a second run decodes nothing new.
    again = services.run_now("topic_traffic")
    assert again.status == ReportRun.Status.SUCCEEDED, again.error
    from console.reports.jobs import reader

    assert reader.exported_rows(settings.REPORTS_EXPORT_URI) == again.input_records


def test_cluster_without_shared_disk_reads_only_the_object_store(
    spark, produced, local, s3, tmp_path, tmp_path_factory
):
    """A Master and two Workers that cannot see the store, the local export
    or the project's code run all four reports from the object store; the
    results equal local mode's."""
    if os.geteuid() != 0:
        pytest.skip("hiding directories from the Spark workers needs root (mount)")
    sys.path.insert(0, str(ROOT / "bench"))
    import spark_cluster

    store, opts, _ = produced
    base = tmp_path_factory.getbasetemp()
    port, ui, worker_ui = (spark_cluster._free_port() for _ in range(3))
    cluster = spark_cluster.start(
        Path(f"/tmp/spark-cluster-{os.getpid()}"),
        workers=2,
        hide=[base, ROOT / "console", ROOT / "broker_core"],
        port=port,
        webui_port=ui,
        worker_webui_port=worker_ui,
    )
    try:
        # The ports it was given (a deployment behind a firewall sets them).
        assert cluster.url == f"spark://127.0.0.1:{port}"
        for p in (ui, worker_ui):
            socket.create_connection(("127.0.0.1", p), timeout=5).close()
        # The Workers (and the executors they fork) really see empty
        # filesystems there: the hiding mounts are in their mount table.
        for proc in cluster.procs[1:]:
            mounts = Path(f"/proc/{proc.pid}/mountinfo").read_text()
            for hidden in (base, ROOT / "console", ROOT / "broker_core"):
                assert f" {hidden} " in mounts, (hidden, proc.pid)
        env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "console.settings",
            "DATABASE_URL": f"sqlite:///{tmp_path / 'cluster.sqlite3'}",
            "VAR_DIR": str(tmp_path / "var"),
            "BROKER_STORE_DIR": str(store),
            "BROKER_STORE_OPTIONS": json.dumps(opts),
            "SPARK_MASTER": cluster.url,
            "SPARK_CONF_spark__executor__memory": "512m",
            "REPORTS_EXPORT_URI": s3.format("t2/export"),
            "REPORTS_RESULTS_URI": s3.format("t2/results"),
        }
        py = sys.executable
        subprocess.run([py, "manage.py", "migrate", "--noinput", "-v0"], cwd=ROOT,
                       env=env, check=True, timeout=120)  # fmt: skip
        done = subprocess.run(
            [py, "manage.py", "run_report", "--all"],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=900,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-5000:]
        outs = {o["report"]: o for o in json.loads(done.stdout)}
        # Both workers' executors took part.
        logs = [p for p in cluster.directory.rglob("stderr") if "worker-" in str(p)]
        used = {p.relative_to(cluster.directory).parts[0] for p in logs}
        assert used == {"worker-0", "worker-1"}, used
    finally:
        cluster.stop()
    from console.reports.models import ReportRun

    for name in REPORT_NAMES:
        out = outs[name]
        assert out["status"] == "SUCCEEDED", out.get("error")
        assert _without_moment(out["summary"]) == local[name]["summary"]
        run = ReportRun(pk=out["run"], report=name, rows=out["rows"],
                        result_dir=out["result_dir"])  # fmt: skip
        assert _tables(run) == local[name]["tables"], name
