"""``GET /api/cluster/`` and ``GET /api/cluster/nodes/{key}/`` over real
nodes (stores serving their admin API, a real route registry)."""

from __future__ import annotations

import pytest

from broker_core import Message
from broker_core.transaction import TransactionService

pytestmark = [pytest.mark.services, pytest.mark.django_db]


def test_the_cluster_as_json(nodes, api_as, settings):
    settings.CLUSTER_ADMIN_TIMEOUT_S = 1.0
    broker = nodes.start("broker-a")
    tx = TransactionService(broker)
    tid = tx.send_half("PID_shop", Message("orders", b"x", keys="k1")).transaction_id
    tx.close()
    nodes.silent("broker-s")
    api = api_as("viewer")

    got = api.get("/api/cluster/")
    assert got.status_code == 200, got.content
    body = got.json()
    assert body["cluster"] == settings.BROKER_CLUSTER
    by_key = {n["key"]: n for n in body["nodes"]}
    assert set(by_key) == {"broker-a:0", "broker-s:0"}
    assert by_key["broker-a:0"]["is_master"] and by_key["broker-a:0"]["error"] == ""
    assert by_key["broker-s:0"]["error"]  # the silent one is named, not dropped
    assert [(h["node"], h["transaction_id"]) for h in body["halves"]] == [
        ("broker-a", tid)
    ]
    assert any(e.startswith("Not reachable: broker-s") for e in body["errors"])

    one = api.get("/api/cluster/nodes/broker-a:0/").json()
    assert one["node"]["key"] == "broker-a:0" and one["pending_halves"] == 1
    assert one["counters"] and one["missing"] == {}

    assert api.get("/api/cluster/nodes/broker-z:0/").status_code == 404
    bad = api.get("/api/cluster/nodes/nonsense/")
    assert bad.status_code == 404 and "not a node key" in bad.json()["message"]


def test_no_cluster_and_no_registry(db, api_as, settings):
    api = api_as("viewer")
    settings.BROKER_CLUSTER = ""
    alone = api.get("/api/cluster/")
    assert alone.status_code == 404 and "single node" in alone.json()["message"]
    settings.BROKER_CLUSTER = "c"
    settings.REGISTRY_URL = "redis://127.0.0.1:1/0"  # nothing listens there
    away = api.get("/api/cluster/")
    assert away.status_code == 503
    assert away.json()["code"] == "registry_unavailable"


def test_the_cluster_api_needs_a_sign_in(db, client):
    assert client.get("/api/cluster/").status_code in (401, 403)
