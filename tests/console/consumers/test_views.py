"""Consumer group pages: lag for every role; reset with preview for operators."""

from __future__ import annotations

import pytest

from broker_core import Message
from console.audit.models import AuditRecord

pytestmark = pytest.mark.django_db


@pytest.fixture
def lagging(broker):
    broker.create_topic("events", 2)
    broker.send_batch(
        [Message("events", b"e%d" % i, queue_id=i % 2) for i in range(40)]
    )
    broker.commit_offset("analytics", "events", 0, 5)
    broker.commit_offset("analytics", "events", 1, 20)
    return "analytics"


@pytest.mark.parametrize("role", ["viewer", "operator", "admin"])
def test_list_and_detail(client_as, lagging, role) -> None:
    c = client_as(role)
    body = c.get("/consumer-groups/").content.decode()
    assert "analytics" in body and ">15<" in body  # 15 behind on queue 0, 0 on queue 1
    detail = c.get("/consumer-groups/analytics/").content.decode()
    assert ("Reset offsets" in detail) == (role != "viewer")


def test_filter_by_lag(client_as, lagging) -> None:
    body = (
        client_as("viewer").get("/consumer-groups/", {"min_lag": 100}).content.decode()
    )
    assert "analytics" not in body


def test_unknown_group_404_and_no_role_403(client_as, lagging) -> None:
    assert client_as("viewer").get("/consumer-groups/nobody/").status_code == 404
    assert client_as("none").get("/consumer-groups/").status_code == 403


def test_preview_changes_nothing(client_as, lagging, broker) -> None:
    r = client_as("operator").post(
        "/consumer-groups/analytics/reset/preview/",
        {"topic": "events", "mode": "offset", "offset": 0},
    )
    assert r.status_code == 200
    assert b"5 consumed again" in r.content and b"20 consumed again" in r.content
    assert broker.committed_offset("analytics", "events", 0) == 5
    assert not AuditRecord.objects.exists()


def test_reset_to_offset_needs_reason_and_operator(client_as, lagging, broker) -> None:
    data = {"topic": "events", "mode": "offset", "offset": 2, "queue_id": 0}
    assert (
        client_as("viewer").post("/consumer-groups/analytics/reset/", data).status_code
        == 403
    )
    assert (
        client_as("viewer")
        .post("/consumer-groups/analytics/reset/preview/", data)
        .status_code
        == 403
    )
    client_as("operator").post("/consumer-groups/analytics/reset/", data)
    assert broker.committed_offset("analytics", "events", 0) == 5  # no reason: refused
    r = client_as("operator").post(
        "/consumer-groups/analytics/reset/", data | {"reason": "reprocess after fix"}
    )
    assert r.status_code == 302
    assert broker.committed_offset("analytics", "events", 0) == 2
    assert broker.committed_offset("analytics", "events", 1) == 20
    rec = AuditRecord.objects.get()
    assert rec.before == {"0": 5} and rec.after["offsets"] == {"0": 2}


def test_reset_to_time(client_as, lagging, broker) -> None:
    r = client_as("operator").post(
        "/consumer-groups/analytics/reset/",
        {
            "topic": "events",
            "mode": "time",
            "at": "2999-01-01T00:00:00",
            "reason": "skip all",
        },
    )
    assert r.status_code == 302
    assert broker.committed_offset("analytics", "events", 0) == 20
    assert broker.committed_offset("analytics", "events", 1) == 20
