"""Topic pages under each role: reads for all, administration for admins."""

from __future__ import annotations

import pytest

from broker_core import Message
from console.audit.models import AuditRecord

pytestmark = pytest.mark.django_db


@pytest.fixture
def orders(broker):
    broker.create_topic("orders", 2)
    for i in range(30):
        broker.send(
            Message(
                "orders",
                f'{{"n": {i}}}'.encode(),
                tags="paid" if i % 2 else "new",
                keys=f"order-{i}",
                queue_id=i % 2,
            )
        )
    return "orders"


@pytest.mark.parametrize("role", ["viewer", "operator", "admin"])
def test_list_and_detail(client_as, orders, role) -> None:
    c = client_as(role)
    body = c.get("/topics/").content.decode()
    assert ">orders</a>" in body
    assert "RMQ_SYS_TRANS_HALF_TOPIC" not in body  # internal topics hidden by default
    assert ("New topic" in body) == (role == "admin")
    detail = c.get("/topics/orders/").content.decode()
    assert "30" in detail
    assert ("Delete</a>" in detail) == (role == "admin")
    assert ("Send a test message" in detail) == (role != "viewer")


def test_internal_topics_on_request(client_as, orders) -> None:
    body = client_as("viewer").get("/topics/", {"system": "true"}).content.decode()
    assert "RMQ_SYS_TRANS_HALF_TOPIC" in body and ">orders</a>" not in body


def test_no_role_refused(client_as, orders) -> None:
    assert client_as("none").get("/topics/").status_code == 403
    assert client_as("none").get("/topics/orders/").status_code == 403


@pytest.mark.parametrize("role", ["viewer", "operator"])
def test_non_admins_cannot_administer(client_as, orders, role) -> None:
    c = client_as(role)
    assert c.get("/topics/new/").status_code == 403
    assert (
        c.post(
            "/topics/new/",
            {
                "name": "x",
                "read_queue_nums": 1,
                "write_queue_nums": 1,
                "perm": 6,
                "message_type": "NORMAL",
            },
        ).status_code
        == 403
    )
    assert c.post("/topics/orders/edit/", {}).status_code == 403
    assert (
        c.post(
            "/topics/orders/delete/", {"confirm": "orders", "reason": "bye"}
        ).status_code
        == 403
    )
    assert not AuditRecord.objects.exists()


def test_admin_creates_edits_and_deletes(client_as, broker) -> None:
    c = client_as("admin")
    r = c.post(
        "/topics/new/",
        {
            "name": "payments",
            "read_queue_nums": 3,
            "write_queue_nums": 3,
            "perm": 6,
            "message_type": "NORMAL",
            "reason": "launch",
        },
    )
    assert r.status_code == 302
    assert broker.store.get_topic("payments").read_queue_nums == 3
    r = c.post(
        "/topics/payments/edit/",
        {
            "read_queue_nums": 4,
            "write_queue_nums": 4,
            "perm": 4,
            "message_type": "NORMAL",
            "reason": "grow",
        },
    )
    assert r.status_code == 302
    assert broker.store.get_topic("payments").perm == 4
    # A wrong typed name does not delete.
    r = c.post("/topics/payments/delete/", {"confirm": "payment", "reason": "retire"})
    assert r.status_code == 200 and b"does not match" in r.content
    r = c.post("/topics/payments/delete/", {"confirm": "payments", "reason": "retire"})
    assert r.status_code == 302
    assert "payments" not in {t.topic_name for t in broker.list_topics()}
    actions = list(
        AuditRecord.objects.order_by("id").values_list(
            "action", "status", "actor_username"
        )
    )
    assert actions == [
        ("topic.create", "success", "admin"),
        ("topic.update", "success", "admin"),
        ("topic.delete", "success", "admin"),
    ]
    assert AuditRecord.objects.get(action="topic.update").before["perm"] == 6


def test_create_existing_topic_shows_error_and_audits_failure(
    client_as, orders
) -> None:
    r = client_as("admin").post(
        "/topics/new/",
        {
            "name": "orders",
            "read_queue_nums": 1,
            "write_queue_nums": 1,
            "perm": 6,
            "message_type": "NORMAL",
        },
    )
    assert r.status_code == 200 and b"already exists" in r.content
    assert AuditRecord.objects.get().status == "failed"


def test_browse_queue_by_offset_and_time(client_as, orders, broker) -> None:
    c = client_as("viewer")
    body = c.get("/topics/orders/queues/1/").content.decode()
    assert body.count('title="order-') == 15
    body = c.get("/topics/orders/queues/1/", {"offset": 10}).content.decode()
    assert body.count('title="order-') == 5
    body = c.get(
        "/topics/orders/queues/0/", {"at": "2000-01-01T00:00:00"}
    ).content.decode()
    assert body.count('title="order-') == 15
    body = c.get(
        "/topics/orders/queues/0/", {"at": "2999-01-01T00:00:00"}
    ).content.decode()
    assert "No messages." in body
    assert c.get("/topics/orders/queues/7/").status_code == 404


def test_send_test_message(client_as, orders, broker) -> None:
    assert (
        client_as("viewer").post("/topics/orders/send/", {"body": "x"}).status_code
        == 403
    )
    r = client_as("operator").post(
        "/topics/orders/send/",
        {"body": "hello", "tags": "t1", "keys": "k1 k2", "properties": "region=eu"},
    )
    assert r.status_code == 302 and r["Location"].startswith("/messages/")
    msg = broker.query_by_key("orders", "k2")[0]
    assert msg.body == b"hello" and msg.properties["region"] == "eu"
    assert AuditRecord.objects.get().action == "message.send_test"


def test_send_with_delay_level_is_scheduled(client_as, orders) -> None:
    r = client_as("operator").post(
        "/topics/orders/send/", {"body": "later", "delay_level": 4}
    )
    assert r.status_code == 302 and "level=4" in r["Location"]
    from console.delays.services import delay_stats

    assert delay_stats().levels[3].backlog == 1
    page = client_as("operator").get(r["Location"]).content.decode()
    assert "orders" in page and "Cancel</button>" in page


def test_send_with_a_delivery_time_within_and_beyond_the_cap(
    client_as, orders, broker
) -> None:
    """The test-send form's delivery time: a timer message, refused past
    BROKER_MAX_DELAY_S (RocketMQ's 3 days) with the reason shown."""
    import datetime as dt

    from django.utils import timezone

    c = client_as("operator")
    soon = timezone.localtime() + dt.timedelta(hours=1)
    r = c.post(
        "/topics/orders/send/",
        {"body": "in an hour", "deliver_at": soon.strftime("%Y-%m-%d %H:%M:%S")},
    )
    assert r.status_code == 302 and "kind=timer" in r["Location"]
    from console.delays.services import delay_stats

    assert delay_stats().timers.pending == 1
    far = timezone.localtime() + dt.timedelta(days=4)
    r = c.post(
        "/topics/orders/send/",
        {"body": "too far", "deliver_at": far.strftime("%Y-%m-%d %H:%M:%S")},
        follow=True,
    )
    page = r.content.decode()
    assert "Not sent: the delivery time is" in page
    assert "beyond the maximum delay of 3 days" in page
    assert delay_stats().timers.pending == 1
    both = c.post(
        "/topics/orders/send/",
        {"body": "x", "delay_level": 2, "deliver_at": soon.strftime("%Y-%m-%d")},
        follow=True,
    ).content.decode()
    assert "Give a delay level or a delivery time." in both


def test_django_admin_lists_topics_read_only(client, django_user_model, orders) -> None:
    from console.topics.services import sync_topics

    sync_topics(force=True)
    su = django_user_model.objects.create_superuser("root", password="x" * 12)
    client.force_login(su)
    assert b"orders" in client.get("/admin/topics/topic/").content
    assert client.get("/admin/topics/topic/add/").status_code == 403
    assert client.get("/admin/consumers/consumerqueue/").status_code == 200
