"""Choosing a cluster node for a run or a schedule: validated against the
cluster's nodes, stored, handed to the scheduled task; refused on a single
host. (The runs themselves: test_nodes.py.)"""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.django_db


@pytest.fixture
def single_host(settings):
    settings.BROKER_NODE = settings.BROKER_CLUSTER = ""
    settings.CLUSTER_NODES = []


@pytest.fixture
def two_nodes(settings):
    settings.BROKER_NODE = settings.BROKER_CLUSTER = ""
    settings.CLUSTER_NODES = ["broker-a", "broker-b"]


def test_a_single_host_has_no_node_to_choose(single_host, api_as, client_as):
    resp = api_as("operator").post(
        "/api/reports/topic_traffic/run/", {"node": "broker-a"}, format="json"
    )
    assert resp.status_code == 400
    assert "single host" in resp.json()["fields"]["node"][0]
    page = client_as("operator").get("/reports/topic_traffic/").content.decode()
    assert 'name="node"' not in page


def test_a_console_with_only_the_cluster_page_reports_on_its_own_store(settings):
    # BROKER_CLUSTER alone turns on the Cluster page; the reports worker then
    # exports at the single host's layout, and runs must read that one.
    from console.reports import services

    settings.BROKER_NODE = ""
    settings.CLUSTER_NODES = []
    settings.BROKER_CLUSTER = "c1"
    assert not services.cluster_mode()
    settings.CLUSTER_NODES = ["broker-a"]
    assert services.cluster_mode()


def test_a_run_or_schedule_names_a_known_node(two_nodes, api_as, client_as):
    from django_celery_beat.models import PeriodicTask

    from console.reports import services

    resp = api_as("operator").post(
        "/api/reports/consumer_lag/run/", {"node": "broker-z"}, format="json"
    )
    assert resp.status_code == 400
    assert "one of broker-a, broker-b" in resp.json()["fields"]["node"][0]
    for bad in ("../x", "chunks"):
        with pytest.raises(services.UnknownNodeError):
            services.check_node(bad)

    operator = client_as("operator")
    page = operator.get("/reports/consumer_lag/").content.decode()
    assert '<option value="broker-b">broker-b</option>' in page
    operator.post(
        "/reports/consumer_lag/schedule/",
        {"enabled": "on", "every_minutes": 30, "node": "broker-b"},
    )
    task = PeriodicTask.objects.get(name="report: consumer_lag")
    kwargs = json.loads(task.kwargs)
    assert kwargs == {"name": "consumer_lag", "window": "all", "node": "broker-b"}
    # What beat then runs: a run over broker-b alone.
    run = services.scheduled_run(**{k: v for k, v in kwargs.items() if k != "name"},
                                 name="consumer_lag")  # fmt: skip
    assert run.node == "broker-b"
    refused = operator.post(
        "/reports/consumer_lag/schedule/",
        {"enabled": "on", "every_minutes": 30, "node": "broker-z"},
    )
    assert refused.status_code == 302
    task.refresh_from_db()
    assert json.loads(task.kwargs)["node"] == "broker-b"  # unchanged


def test_a_nodes_export_task_is_skipped_on_another_nodes_worker(settings):
    from console.reports.tasks import export_task

    settings.BROKER_NODE = "broker-a"
    assert "this worker serves broker-a" in export_task(node="broker-b")["skipped"]


def test_history_of_a_cluster_run(two_nodes, client_as):
    from console.reports.models import ReportRun

    ReportRun.objects.create(
        report="consumer_lag",
        trigger="command",
        status="SUCCEEDED",
        node="broker-a",
        log_end=12_345,
        summary={"nodes": {"broker-a": {"log_end": 12_345}}},
    )
    page = client_as("viewer").get("/reports/consumer_lag/").content.decode()
    assert "node broker-a" in page and "12,345 log bytes over 1 node" in page
