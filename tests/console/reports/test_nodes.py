"""Reports over a cluster's nodes (real Spark, real stores): two stores written
by real Brokers, each exported as its node under one export directory, then
reported on by a console host that has no store of its own, over the cluster
and over each node; a node's export that is missing, stale or incomplete
fails the run with the reason."""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from broker_core import Broker, Message

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.django_db]

NODES = ("broker-a", "broker-b")
REPORT_NAMES = ("topic_traffic", "transaction_outcomes", "delay_punctuality",
                "consumer_lag")  # fmt: skip
OPTS = {"segment_size": 64 * 1024}
# Columns computed against the run's "now", not the data.
MOMENT_SUFFIXES = ("age_ms", "lag_ms")


def _write_store(path: Path, node: str) -> dict:
    """A node's traffic; both nodes start with the same records, so their
    halves and parked timers lie at the same offsets, decided differently."""
    from broker_core.schedule import DelayService
    from broker_core.transaction import TransactionService

    facts: dict = {"messages": Counter()}
    with Broker.open(str(path), **OPTS) as broker:
        for i in range(200):
            topic = ("orders", "audit")[i % 2]
            broker.send(Message(topic, b"x" * (4 + i % 9), tags="t", keys=f"k{i % 5}"))
            facts["messages"][topic] += 1
        with TransactionService(
            broker, transaction_timeout_ms=60_000, check_interval_ms=0
        ) as tx:
            halves = [
                tx.send_half("PID_shop", Message("orders", b"half")) for _ in range(4)
            ]
            outcome = "COMMIT" if node == "broker-a" else "ROLLBACK"
            for h in halves[:3] if node == "broker-a" else halves[:1]:
                tx.end_transaction(h.transaction_id, "PID_shop", outcome)
                facts["messages"]["orders"] += outcome == "COMMIT"
        facts["committed"] = 3 if node == "broker-a" else 0
        facts["pending"] = 1 if node == "broker-a" else 3
        delays = DelayService(broker)
        timers = 2 if node == "broker-a" else 3
        for _ in range(timers):
            broker.send(Message("later", b"T", properties={"TIMER_DELAY_MS": "50"}))
        delivered, deadline = 0, time.monotonic() + 30
        while delivered < timers and time.monotonic() < deadline:
            delivered += delays.deliver_due().delivered
            time.sleep(0.02)
        assert delivered == timers
        facts["messages"]["later"] += timers
        facts["timers"] = timers
        delays.close()
        if node == "broker-b":  # broker-b's own traffic after the shared start
            for _ in range(90):
                broker.send(Message("orders", b"b" * 7, tags="b"))
            facts["messages"]["orders"] += 90
        ends = {q: broker.store.max_offset("orders", q) for q in range(4)}
        for q, end in ends.items():
            broker.commit_offset("billing", "orders", q, end // 3)
        facts["lag"] = sum(end - end // 3 for end in ends.values())
        facts["queues"] = {("billing", "orders", q) for q in ends}
    return facts


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    base = tmp_path_factory.mktemp("nodes")
    return {node: (base / node, _write_store(base / node, node)) for node in NODES}


def _export_nodes(settings, stores, export: str, results: str, tmp_path) -> None:
    """Each node's host exports its store as that node to ``export``; then
    this process is the console host: no node, no store."""
    from console.reports import services

    settings.BROKER_STORE_OPTIONS = {}
    settings.REPORTS_DIR = tmp_path / "reports"
    settings.REPORTS_EXPORT_URI = export
    settings.REPORTS_RESULTS_URI = results
    settings.CLUSTER_NODES = list(NODES)
    for node in NODES:
        settings.BROKER_NODE = node
        settings.BROKER_STORE_DIR = stores[node][0]
        done = services.export_now()
        assert done["node"] == node and done["rows"] > 0
    settings.BROKER_NODE = ""
    settings.BROKER_STORE_DIR = tmp_path / "no-store-here"


@pytest.fixture
def cluster(spark, stores, settings, tmp_path):
    """The nodes' exports in a local directory (returned)."""
    _export_nodes(settings, stores, str(tmp_path / "export"), "", tmp_path)
    return tmp_path / "export"


@dataclass
class Ran:
    """A succeeded run's figures as plain values, kept past its test's
    database (``node_reports``): its summary, tables (``_table``'s rows) and
    input records."""

    summary: dict
    rows: dict
    tables: dict[str, list[dict]]
    input_records: int


def _table(run, name: str) -> list[dict]:
    from console.reports import results as report_results

    if isinstance(run, Ran):
        return run.tables[name]
    data = report_results.read_arrow(run, name)
    moment = [c for c in data.column_names if c.endswith(MOMENT_SUFFIXES)]
    rows = data.drop_columns(moment).to_pylist()
    return [{k: _instant(v) for k, v in row.items()} for row in rows]


def _instant(value):
    """Times as UTC ISO text: Spark's own writer (a local directory) stores
    them without a zone, the Arrow writer (an object store) with UTC."""
    if isinstance(value, datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        return value.astimezone(UTC).isoformat()
    return value


def _sorted(rows: list[dict], drop: tuple[str, ...] = ()) -> list[str]:
    return sorted(repr({k: v for k, v in r.items() if k not in drop}) for r in rows)


def _plus(x, y):
    """The sum of two figures, or of two dicts of figures key by key."""
    if isinstance(x, dict):
        return {k: x.get(k, 0) + y.get(k, 0) for k in {*x, *y}}
    return x + y


#: Figures that depend on when a run happens are kept apart from the
#: comparison: a half counts as stuck once pending for ``stuck_after_s``
#: (60 s by default) at the run's moment, so two runs a few seconds apart
#: counted 2 and 3 when one half crossed the line between them.
TIMELESS = {"transaction_outcomes": {"stuck_after_s": 86_400}}


def _run(name: str, node: str = ""):
    from console.reports import services

    run = services.run_now(name, node=node, params=TIMELESS.get(name))
    assert run.status == "SUCCEEDED", run.error
    return run


@pytest.fixture(scope="module")
def node_reports(spark, stores, tmp_path_factory, django_db_setup, django_db_blocker):
    """Every report over the nodes' export in a local directory (returned as
    ``export``): over the cluster (``""``) and over each node, each run once
    for the module and kept as plain values (``Ran``); the runs' history rows
    are rolled back at once, their result files stay for the module."""
    from django.conf import settings
    from django.db import transaction
    from django.test import override_settings

    tmp = tmp_path_factory.mktemp("node-reports")
    out: dict = {}
    with django_db_blocker.unblock(), transaction.atomic(), override_settings():
        _export_nodes(settings, stores, str(tmp / "export"), "", tmp)
        for node in ("", *NODES):
            out[node] = {}
            for name in REPORT_NAMES:
                run = _run(name, node)
                tables = {t: _table(run, t) for t in run.rows}
                out[node][name] = Ran(
                    run.summary, dict(run.rows), tables, run.input_records
                )
        transaction.set_rollback(True)
    out["export"] = tmp / "export"
    return out


def test_cluster_report_is_the_sum_of_its_nodes(node_reports, stores):
    # The layout: one directory and manifest per node, nothing at the root.
    cluster = node_reports["export"]
    assert sorted(p.name for p in cluster.iterdir()) == list(NODES)
    for node in NODES:
        manifest = json.loads((cluster / node / "manifest.json").read_text())
        assert manifest["node"] == node and manifest["offsets"]

    runs = {node: node_reports[node] for node in ("", *NODES)}
    whole, a, b = runs[""], runs["broker-a"], runs["broker-b"]
    facts = {node: stores[node][1] for node in NODES}

    # Each node's report is its own store's traffic.
    for node in NODES:
        traffic = runs[node]["topic_traffic"].summary
        assert traffic["messages"] == sum(facts[node]["messages"].values())
        tx = runs[node]["transaction_outcomes"].summary
        assert tx["states"]["COMMITTED"] == facts[node]["committed"]
        assert tx["states"]["PENDING"] == facts[node]["pending"]
        delay = runs[node]["delay_punctuality"].summary
        assert delay["scheduled"] == delay["delivered"] == facts[node]["timers"]
        assert runs[node]["consumer_lag"].summary["lag"] == facts[node]["lag"]
        assert list(runs[node]["consumer_lag"].summary["nodes"]) == [node]

    # The cluster's figures are the sums of the nodes' (not a merge of
    # broker-a's and broker-b's halves and timers at the same offsets).
    for key in ("messages", "bytes"):
        got = whole["topic_traffic"].summary[key]
        assert got == a["topic_traffic"].summary[key] + b["topic_traffic"].summary[key]
    for key in ("halves", "states", "decided_by"):
        assert whole["transaction_outcomes"].summary[key] == _plus(
            a["transaction_outcomes"].summary[key],
            b["transaction_outcomes"].summary[key],
        )
    for key in ("scheduled", "delivered", "recalled", "early"):
        got = whole["delay_punctuality"].summary[key]
        assert (
            got
            == a["delay_punctuality"].summary[key] + b["delay_punctuality"].summary[key]
        )
    assert (
        whole["consumer_lag"].summary["lag"]
        == facts["broker-a"]["lag"] + facts["broker-b"]["lag"]
    )
    # Per-row tables of the cluster are the nodes' rows together.
    for report, table in (
        ("consumer_lag", "queues"),
        ("transaction_outcomes", "halves"),
        ("delay_punctuality", "scheduled"),
    ):
        both = _table(a[report], table) + _table(b[report], table)
        assert _sorted(_table(whole[report], table)) == _sorted(both), table
    hourly = Counter()
    for run in (a["topic_traffic"], b["topic_traffic"]):
        for row in _table(run, "hourly"):
            hourly[(row["topic"], row["hour"])] += row["messages"]
    got = {(r["topic"], r["hour"]): r["messages"]
           for r in _table(whole["topic_traffic"], "hourly")}  # fmt: skip
    assert got == dict(hourly)

    # Consumer lag: one row per (node, group, topic, queue), both nodes' queue
    # ids 0-3 kept apart.
    queues = _table(whole["consumer_lag"], "queues")
    keys = [(r["node"], r["group"], r["topic"], r["queue_id"]) for r in queues]
    assert len(keys) == len(set(keys))
    assert set(keys) == {(n, *q) for n in NODES for q in facts[n]["queues"]}
    (group,) = _table(whole["consumer_lag"], "groups")
    assert (group["nodes"], group["queues"]) == (2, 8)
    assert whole["consumer_lag"].input_records == sum(
        runs[n]["consumer_lag"].input_records for n in NODES
    )


def test_one_node_equals_its_store_alone(node_reports, stores, settings, tmp_path):
    """broker-b's report from the cluster's export is what a single host with
    broker-b's store reports (today's layout), but for the node's name."""
    node_runs = node_reports["broker-b"]
    settings.BROKER_STORE_OPTIONS = {}
    settings.REPORTS_DIR = tmp_path / "reports"
    settings.REPORTS_RESULTS_URI = ""
    settings.BROKER_NODE = ""
    settings.CLUSTER_NODES = []
    settings.BROKER_STORE_DIR = stores["broker-b"][0]
    settings.REPORTS_EXPORT_URI = str(tmp_path / "single-host-export")
    single = {n: _run(n) for n in REPORT_NAMES}
    for name in REPORT_NAMES:
        summary = {k: v for k, v in node_runs[name].summary.items() if k != "nodes"}
        moment = {"max_lag_ms"}
        assert {k: v for k, v in summary.items() if k not in moment} == {
            k: v for k, v in single[name].summary.items() if k not in moment
        }, name
        for table in node_runs[name].rows:
            got = _table(node_runs[name], table)
            assert {r["node"] for r in got if "node" in r} <= {"broker-b"}
            want = _table(single[name], table)
            assert {r["node"] for r in want if "node" in r} <= {""}
            assert _sorted(got, ("node",)) == _sorted(want, ("node",)), (name, table)
    assert (
        node_runs["consumer_lag"].input_records == single["consumer_lag"].input_records
    )


def test_a_node_export_missing_stale_or_incomplete_fails_the_run(cluster, settings):
    import shutil

    from console.reports import services

    settings.CLUSTER_NODES = [*NODES, "broker-c"]
    failed = services.run_now("topic_traffic")
    assert failed.status == "FAILED"
    assert "node broker-c has no export at" in failed.error
    assert "Traceback" not in failed.error
    settings.CLUSTER_NODES = list(NODES)

    manifest_path = cluster / "broker-b" / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["exported_at"] -= 2 * 3600 * 1000
    manifest_path.write_text(json.dumps(manifest))
    settings.REPORTS_EXPORT_MAX_AGE = 3600
    stale = services.run_now("consumer_lag")
    assert stale.status == "FAILED"
    assert "the export of node broker-b is stale" in stale.error
    # broker-b retired from CLUSTER_NODES: its old export no longer counts.
    settings.CLUSTER_NODES = ["broker-a"]
    assert services.run_now("consumer_lag").status == "SUCCEEDED"
    settings.CLUSTER_NODES = list(NODES)
    # A window that ended before broker-b's last export does not need more.
    earlier = datetime.now(UTC) - timedelta(hours=3)
    assert services.run_now("consumer_lag", until=earlier).status == "SUCCEEDED"
    # broker-a alone does not read broker-b's export.
    assert services.run_now("consumer_lag", node="broker-a").status == "SUCCEEDED"

    manifest["exported_at"] += 2 * 3600 * 1000
    manifest_path.write_text(json.dumps(manifest))
    shutil.rmtree(cluster / "broker-a" / "chunks")
    gone = services.run_now("topic_traffic")
    assert gone.status == "FAILED"
    assert "the export of node broker-a" in gone.error and "incomplete" in gone.error

    with pytest.raises(services.UnknownNodeError, match="one of broker-a, broker-b"):
        services.run_now("topic_traffic", node="broker-z")


def test_nodes_export_to_the_object_store(node_reports, stores, s3, settings, tmp_path):
    """The same nodes exported to an S3 prefix (moto's server): the cluster's
    reports, with their results there too, equal the local directory's."""
    from console.reports.jobs import storage

    names = ("topic_traffic", "consumer_lag")
    local = {n: node_reports[""][n] for n in names}
    _export_nodes(
        settings, stores, s3.format("n/export"), s3.format("n/results"), tmp_path
    )
    root = storage.locate(settings.REPORTS_EXPORT_URI)
    for node in NODES:
        assert root.child(node).read_text("manifest.json")
    assert root.read_text("manifest.json") is None  # nothing at the root
    for name in names:
        remote = _run(name)
        assert remote.result_dir.startswith(s3.format("n/results").split("?")[0])
        assert list(remote.summary["nodes"]) == list(NODES)
        for table in local[name].rows:
            assert _sorted(_table(remote, table)) == _sorted(
                _table(local[name], table)
            ), (name, table)
        assert remote.input_records == local[name].input_records
    one = _run("consumer_lag", "broker-a")
    assert {r["node"] for r in _table(one, "queues")} == {"broker-a"}
