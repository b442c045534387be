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


def test_group_page_shows_its_dead_letters(client_as, lagging, broker) -> None:
    """Messages in %DLQ%<group> are not lag, but the page says they are there."""
    detail = client_as("viewer").get("/consumer-groups/analytics/").content.decode()
    assert '<div class="v">0</div><div class="k">dead letters</div>' in detail
    from broker_core import MessageInner

    for i in range(3):  # as the endpoint dead-letters (RETRY_TOPIC is reserved)
        broker.store.put_inner(
            MessageInner("%DLQ%analytics", 0, b"d%d" % i, {"RETRY_TOPIC": "events"})
        )
    detail = client_as("viewer").get("/consumer-groups/analytics/").content.decode()
    assert ">15<" in detail  # the lag is unchanged
    assert '<div class="v lag-high">3</div>' in detail
    assert "dead letters in %DLQ%analytics" in detail
    assert 'href="/topics/%25DLQ%25analytics/"' in detail


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


def test_a_queue_never_read_counts_its_whole_depth(client_as, broker) -> None:
    """Four queues, the group committed on three: the fourth is listed
    ("never") with all its messages as lag; the topic page lists the group
    once, with its total lag."""
    from console.consumers.services import sync_offsets

    broker.create_topic("orders4", 4)
    broker.send_batch(
        [Message("orders4", b"o%d" % i, queue_id=i % 4) for i in range(40)]
    )
    for q in range(3):
        broker.commit_offset("billing", "orders4", q, 7)  # 3 behind on each
    sync_offsets(force=True)
    c = client_as("viewer")
    assert ">19<" in c.get("/consumer-groups/").content.decode()  # 3 * 3 + 10
    detail = c.get("/consumer-groups/billing/").content.decode()
    assert detail.count('<tr><td><a href="/topics/orders4/">') == 4
    assert ">never<" in detail
    topic = c.get("/topics/orders4/").content.decode()
    assert topic.count(">billing</a>") == 1 and "lag 19" in topic


def test_a_subscribed_group_that_never_consumed_is_listed(client_as, broker) -> None:
    """A group known only from a connected client's subscription (the
    endpoint's clients.json) lags by everything on the topic."""
    import json

    from console.consumers.services import sync_offsets

    broker.create_topic("fresh", 2)
    broker.send_batch([Message("fresh", b"f%d" % i, queue_id=i % 2) for i in range(6)])
    (broker.store.root / "clients.json").write_text(
        json.dumps(
            {
                "clients": [
                    {
                        "client_id": "c1",
                        "client_type": "SIMPLE_CONSUMER",
                        "group": "newcomers",
                        "topics": ["fresh"],
                        "language": "PYTHON",
                        "version": "5.1.2",
                        "address": "ipv4:127.0.0.1:50000",
                        "last_heartbeat": 1_790_000_000.0,
                        "online": True,
                    },
                    {
                        "client_id": "p1",
                        "client_type": "PRODUCER",
                        "group": "",
                        "topics": ["fresh"],
                        "language": "NODE_JS",
                        "version": "1.0.8",
                        "online": True,
                    },
                ]
            }
        )
    )
    sync_offsets(force=True)
    viewer = client_as("viewer")
    body = viewer.get("/consumer-groups/newcomers/").content.decode()
    assert body.count(">never<") == 2 and ">6<" in body
    # Its clients, with language, version and state; not the producer.
    assert ">c1<" in body and "python 5.1.2" in body and ">online<" in body
    assert ">p1<" not in body
    producers = viewer.get("/producer-groups/").content.decode()
    assert ">p1<" in producers and "node_js 1.0.8" in producers
    assert ">c1<" not in producers
