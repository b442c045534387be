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
    silent = nodes.silent("broker-s")
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
    reached = f"node broker-s:0 (http://127.0.0.1:{silent.port}) did not answer: "
    assert reached + "no answer within 1 s" in body["errors"]

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


def test_transactions_are_summed_over_the_masters(nodes, api_as, client_as, settings):
    """Each master's transaction counts, added up on the Cluster page and in
    the API; a master that does not answer is left out and said so."""
    settings.CLUSTER_ADMIN_TIMEOUT_S = 1.0

    def halves(name: str, commit: int, rollback: int, pending: int) -> None:
        tx = TransactionService(nodes.start(name))
        ids = [
            tx.send_half("PID_shop", Message("orders", b"x")).transaction_id
            for _ in range(commit + rollback + pending)
        ]
        for tid in ids[:commit]:
            tx.end_transaction(tid, "PID_shop", "COMMIT")
        for tid in ids[commit : commit + rollback]:
            tx.end_transaction(tid, "PID_shop", "ROLLBACK")
        tx.close()

    halves("broker-a", commit=2, rollback=1, pending=1)
    halves("broker-b", commit=1, rollback=0, pending=3)
    nodes.silent("broker-s")

    total = api_as("viewer").get("/api/cluster/").json()["transactions"]
    assert total["masters"] == 2
    assert (total["pending"], total["commits"], total["rollbacks"]) == (4, 3, 1)
    assert total["pending_by_topic"] == {"orders": 4}

    page = client_as("viewer").get("/cluster/").content.decode()
    tiles = page.split('data-testid="cluster-tx"')[1].split("<h2")[0]
    assert 'data-testid="tx-pending">4<' in tiles
    assert 'data-testid="tx-outcomes">3 / 1<' in tiles
    assert "Summed over 2 masters of 3 (the others did not answer)" in page
