"""``/api/topics/`` under each role."""

from __future__ import annotations

import pytest

from broker_core import Message
from console.audit.models import AuditRecord

pytestmark = pytest.mark.django_db


@pytest.fixture
def orders(broker):
    broker.create_topic("orders", 2)
    broker.send_batch(
        [Message("orders", b"o%d" % i, queue_id=i % 2) for i in range(10)]
    )


@pytest.mark.parametrize("role", ["viewer", "operator", "admin"])
def test_list_and_retrieve(api_as, orders, role) -> None:
    c = api_as(role)
    data = c.get("/api/topics/", {"system": "false"}).json()
    assert [t["name"] for t in data["results"]] == ["orders"]
    t = c.get("/api/topics/orders/").json()
    assert t["messages"] == 10 and t["depths"] == [5, 5]


def test_no_role_and_anonymous(api_as, client, orders) -> None:
    assert api_as("none").get("/api/topics/").status_code == 403
    assert client.get("/api/topics/").status_code in (401, 403)


@pytest.mark.parametrize("role", ["viewer", "operator"])
def test_only_admins_administer(api_as, orders, role) -> None:
    c = api_as(role)
    assert c.post("/api/topics/", {"name": "x"}, format="json").status_code == 403
    assert c.patch("/api/topics/orders/", {"perm": 4}, format="json").status_code == 403
    assert (
        c.delete("/api/topics/orders/", {"reason": "bye"}, format="json").status_code
        == 403
    )
    assert not AuditRecord.objects.exists()


def test_admin_lifecycle(api_as, broker) -> None:
    c = api_as("admin")
    r = c.post(
        "/api/topics/",
        {"name": "pay", "read_queue_nums": 2, "write_queue_nums": 2},
        format="json",
    )
    assert r.status_code == 201 and r.json()["queues"] == 2
    assert (
        c.post("/api/topics/", {"name": "pay"}, format="json").json()["code"]
        == "topic_exists"
    )
    assert (
        c.post("/api/topics/", {"name": "bad name!"}, format="json").status_code == 400
    )
    assert (
        c.patch(
            "/api/topics/pay/", {"perm": 4, "reason": "freeze"}, format="json"
        ).json()["perm"]
        == 4
    )
    assert (
        c.delete("/api/topics/pay/", {}, format="json").status_code == 400
    )  # no reason
    assert (
        c.delete("/api/topics/pay/", {"reason": "retire"}, format="json").status_code
        == 204
    )
    assert c.get("/api/topics/pay/").status_code == 404
    assert list(AuditRecord.objects.order_by("id").values_list("action", "status")) == [
        ("topic.create", "success"),
        ("topic.create", "failed"),
        ("topic.create", "failed"),
        ("topic.update", "success"),
        ("topic.delete", "success"),
    ]


def test_send_and_browse(api_as, orders) -> None:
    assert (
        api_as("viewer")
        .post("/api/topics/orders/send/", {"body": "x"}, format="json")
        .status_code
        == 403
    )
    r = api_as("operator").post(
        "/api/topics/orders/send/",
        {"body": "hi", "tags": "t", "properties": {"a": "1"}},
        format="json",
    )
    assert r.status_code == 201
    qid = r.json()["queue_id"]
    page = (
        api_as("viewer").get("/api/topics/orders/messages/", {"queue_id": qid}).json()
    )
    assert page["messages"][-1]["properties"]["a"] == "1"
    assert "body_text" not in page["messages"][-1]
    page = (
        api_as("operator")
        .get("/api/topics/orders/messages/", {"queue_id": qid, "offset": 5})
        .json()
    )
    assert page["messages"][0]["body_text"] == "hi"


def test_a_topic_that_does_not_exist_is_the_node_s_topic_not_found(
    api_as, broker
) -> None:
    """The node's own error (``TopicNotFoundError``), not the console table's
    generic 404: the same code and wording as the node's admin API."""
    c = api_as("admin")
    gone = {"code": "topic_not_found", "message": "topic 'NOSUCH' does not exist"}
    for r in (
        c.get("/api/topics/NOSUCH/"),
        c.delete("/api/topics/NOSUCH/", {"reason": "retire"}, format="json"),
        c.patch("/api/topics/NOSUCH/", {"perm": 4}, format="json"),
        c.get("/api/topics/NOSUCH/messages/", {"queue_id": 0}),
    ):
        assert (r.status_code, r.json()) == (404, gone)
    # The delete and the edit were tried: each is one FAILED record (the
    # look-up is part of the audited action); the reads are none.
    got = sorted((a.action, a.object_id, a.status) for a in AuditRecord.objects.all())
    assert got == [
        ("topic.delete", "local/NOSUCH", "failed"),
        ("topic.update", "local/NOSUCH", "failed"),
    ]
    # A topic made on the node since the table's last sync is found at once.
    c.get("/api/topics/")
    broker.create_topic("fresh", 1)
    assert c.get("/api/topics/fresh/").status_code == 200
