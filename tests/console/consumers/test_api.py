"""``/api/consumer-groups/``: lag for all roles, reset for operators."""

from __future__ import annotations

import pytest

from broker_core import Message
from console.audit.models import AuditRecord

pytestmark = pytest.mark.django_db


@pytest.fixture
def group(broker):
    broker.create_topic("events", 2)
    broker.send_batch([Message("events", b"e", queue_id=i % 2) for i in range(20)])
    broker.commit_offset("etl", "events", 0, 3)
    broker.commit_offset("etl", "events", 1, 10)


@pytest.mark.parametrize("role", ["viewer", "operator", "admin"])
def test_list_and_detail(api_as, group, role) -> None:
    c = api_as(role)
    rows = c.get("/api/consumer-groups/", {"min_lag": 1}).json()["results"]
    assert [(r["group"], r["queue_id"], r["lag"]) for r in rows] == [("etl", 0, 7)]
    assert c.get("/api/consumer-groups/etl/").json()["lag"] == 7
    assert c.get("/api/consumer-groups/nope/").status_code == 404


def test_reset(api_as, group, broker) -> None:
    url = "/api/consumer-groups/etl/reset-offset/"
    body = {"topic": "events", "to_offset": 0, "reason": "replay"}
    assert api_as("viewer").post(url, body, format="json").status_code == 403
    preview = (
        api_as("operator").post(url, body | {"dry_run": True}, format="json").json()
    )
    assert not preview["applied"] and [c["delta"] for c in preview["changes"]] == [
        3,
        10,
    ]
    assert broker.committed_offset("etl", "events", 0) == 3
    assert (
        api_as("operator")
        .post(url, {"topic": "events", "to_offset": 0}, format="json")
        .status_code
        == 400
    )
    r = api_as("operator").post(url, body, format="json")
    assert r.status_code == 200 and r.json()["applied"]
    assert broker.committed_offset("etl", "events", 1) == 0
    bad = api_as("operator").post(
        url,
        {"topic": "events", "to_offset": 99, "queue_id": 0, "reason": "x" * 5},
        format="json",
    )
    assert bad.status_code == 400 and bad.json()["code"] == "invalid_offset"
    assert AuditRecord.objects.filter(action="consumer_group.reset_offset").count() == 1
