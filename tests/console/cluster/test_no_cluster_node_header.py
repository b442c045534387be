"""Without a cluster, ``X-Broker-Node`` naming a node other than the
console's own is 404 ``node_not_found``, as with a cluster; it was ignored
and the action ran against the local store (audited ``local/<id>``)."""

from __future__ import annotations

import pytest

from broker_core import Message
from console.audit.models import AuditRecord

pytestmark = pytest.mark.django_db


@pytest.fixture
def half(broker, settings):
    from console.brokerlink import get_transaction_service

    settings.BROKER_CLUSTER = ""
    svc = get_transaction_service()
    return svc.send_half("PID_x", Message("orders", b"x", keys="k")).transaction_id


def test_another_node_is_not_found(api_as, half):
    r = api_as("viewer").get("/api/transactions/", HTTP_X_BROKER_NODE="broker-zz")
    assert r.status_code == 404
    assert r.json()["code"] == "node_not_found"
    assert "broker-zz" in r.json()["message"]
    r = api_as("operator").post(
        f"/api/transactions/{half}/rollback/",
        {"reason": "wrong node"},
        format="json",
        HTTP_X_BROKER_NODE="broker-zz",
    )
    assert r.status_code == 404 and r.json()["code"] == "node_not_found"
    (record,) = AuditRecord.objects.all()
    assert record.object_id == f"broker-zz/{half}" and record.status == "failed"
    from console.brokerlink import get_transaction_service

    state = get_transaction_service().get_half(half).info.state
    assert state.value == "PENDING"  # the local store was not touched


@pytest.mark.parametrize(("own", "header"), [("", "local"), ("broker-a", "broker-a")])
def test_the_own_node_by_name_is_the_local_store(api_as, half, settings, own, header):
    settings.BROKER_NODE = own
    r = api_as("operator").post(
        f"/api/transactions/{half}/rollback/",
        {"reason": "mine"},
        format="json",
        HTTP_X_BROKER_NODE=header,
    )
    assert r.status_code == 200, r.content
    (record,) = AuditRecord.objects.all()
    assert record.object_id == f"{header}/{half}" and record.status == "success"
