"""Producer group pages: all roles read; admins set the check-back webhook."""

from __future__ import annotations

import pytest

from console.audit.models import AuditRecord
from console.brokerlink import get_transaction_service

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("role", ["viewer", "operator", "admin"])
def test_list_and_detail(client_as, halves, role) -> None:
    body = client_as(role).get("/producer-groups/").content.decode()
    assert "PID_orders" in body and "PID_pay" in body
    detail = client_as(role).get("/producer-groups/PID_orders/").content.decode()
    assert "connection refused" in detail  # the latest failed check-backs
    assert ("Save webhook" in detail) == (role == "admin")


def test_configure_webhook(client_as, halves) -> None:
    url = "/producer-groups/PID_pay/checker/"
    data = {"url": "https://pay.internal/tx-check", "secret": "s3cret", "timeout_s": 3}
    assert client_as("operator").post(url, data).status_code == 403
    client_as("admin").post(url, data | {"reason": "new endpoint"})
    cfg = get_transaction_service().checkers.configured()["PID_pay"]
    assert cfg["url"] == "https://pay.internal/tx-check" and cfg["secret"] == "***"
    body = client_as("viewer").get("/producer-groups/PID_pay/").content.decode()
    assert "s3cret" not in body and "pay.internal" in body
    rec = AuditRecord.objects.get()
    assert rec.action == "producer_group.configure_checker"
    assert "s3cret" not in str(rec.after)
    assert client_as("operator").post(url + "remove/").status_code == 403
    client_as("admin").post(url + "remove/")
    assert "PID_pay" not in get_transaction_service().checkers.configured()


def test_connected_clients_from_the_grpc_endpoint(client_as, halves, settings) -> None:
    import json
    import time
    from pathlib import Path

    clients = [
        {
            "client_id": "host@1#producer",
            "client_type": "PRODUCER",
            "group": "",
            "topics": ["PID_orders"],
            "address": "127.0.0.1:50001",
            "last_heartbeat": time.time(),
            "online": True,
        },
        {
            "client_id": "host@2#consumer",
            "client_type": "SIMPLE_CONSUMER",
            "group": "CID_other",
            "topics": ["payments"],
            "address": "127.0.0.1:50002",
            "last_heartbeat": time.time(),
            "online": True,
        },
    ]
    path = Path(settings.BROKER_STORE_DIR) / "clients.json"
    path.write_text(json.dumps({"clients": clients}))
    body = client_as("viewer").get("/producer-groups/PID_orders/").content.decode()
    assert "host@1#producer" in body and "127.0.0.1:50001" in body
    assert "host@2#consumer" not in body
    path.unlink()
    body = client_as("viewer").get("/producer-groups/PID_orders/").content.decode()
    assert "No client of this group is connected" in body
