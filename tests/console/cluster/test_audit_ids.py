"""Audit object ids are ``<node>/<object>`` whichever page or API acted (the
console's own store included: ``BROKER_NODE``, else ``local``), and a Cluster
page action on a node that is not live is audited as failed. Real stores, a
real node with its admin API, a real route registry."""

from __future__ import annotations

import pytest

from broker_core import Message
from broker_core.transaction import TransactionService
from console.audit.models import AuditRecord

pytestmark = [pytest.mark.services, pytest.mark.django_db]


def _ids(action: str) -> list[str]:
    return list(
        AuditRecord.objects.filter(action=action)
        .order_by("id")
        .values_list("object_id", flat=True)
    )


def _consume(broker, group: str, topic: str, count: int) -> None:
    got = broker.pull(group, topic, 0, 0, max_messages=count)
    assert len(got.messages) == count
    broker.commit_offset(group, topic, 0, got.next_offset)


def test_the_consoles_own_store_is_audited_as_its_node(
    nodes, broker, api_as, client_as, settings
):
    """No node picked, no X-Broker-Node: the console's own node by name, the
    same id the picker, the header and the Cluster page write."""
    from console.brokerlink import get_delay_service

    settings.BROKER_NODE = "broker-a"
    a = nodes.start("broker-a")
    admin, operator = api_as("admin"), api_as("operator")

    # topic.create: own store, then the node through the header.
    r = admin.post("/api/topics/", {"name": "TBR", "reason": "own"}, format="json")
    assert r.status_code == 201, r.content
    r = admin.post(
        "/api/topics/", {"name": "TBP"}, format="json", HTTP_X_BROKER_NODE="broker-a"
    )
    assert r.status_code == 201, r.content
    client_as("admin").post(
        "/cluster/topics/", {"topic": "TBC", "queues": "2", "nodes": ["broker-a"]}
    )
    assert _ids("topic.create") == ["broker-a/TBR", "broker-a/TBP", "broker-a/TBC"]

    # consumer_group.reset_offset: own store through the API and through the page.
    for store in (broker, a):
        store.create_topic("TN1", 1)
        store.send_batch([Message("TN1", b"m%d" % i) for i in range(4)])
        _consume(store, "GN1", "TN1", 4)
    r = operator.post(
        "/api/consumer-groups/GN1/reset-offset/",
        {"topic": "TN1", "to_offset": 1, "reason": "replay"},
        format="json",
    )
    assert r.status_code == 200, r.content
    client_as("operator").post(
        "/cluster/consumers/reset/",
        {"node": "broker-a", "group": "GN1", "topic": "TN1", "offset": "2",
         "reason": "replay"},
    )  # fmt: skip
    assert _ids("consumer_group.reset_offset") == ["broker-a/GN1@TN1"] * 2

    # delay.cancel on the delays page of the console's own store.
    own = get_delay_service().send_delayed(Message("orders", b"x"), level=5)
    r = client_as("operator").post(
        f"/delays/scheduled/{own.msg_id}/cancel/", {"reason": "withdrawn"}
    )
    assert r.status_code == 302
    assert _ids("delay.cancel") == [f"broker-a/{own.msg_id}"]

    # transaction.rollback on the Transactions page of the console's own store.
    tx = TransactionService(broker)
    tid = tx.send_half("PID_x", Message("orders", b"h")).transaction_id
    tx.close()
    r = client_as("operator").post(
        f"/transactions/{tid}/rollback/", {"reason": "stuck half"}
    )
    assert r.status_code == 302
    assert _ids("transaction.rollback") == [f"broker-a/{tid}"]
    assert not AuditRecord.objects.exclude(object_id__startswith="broker-a/").exists()


def test_a_single_host_names_its_node_local(broker, api_as, settings):
    settings.BROKER_CLUSTER = settings.BROKER_NODE = ""
    r = api_as("admin").post("/api/topics/", {"name": "solo"}, format="json")
    assert r.status_code == 201, r.content
    assert _ids("topic.create") == ["local/solo"]


def test_a_cluster_action_on_a_node_that_is_not_live_is_audited_failed(
    nodes, client_as, settings
):
    nodes.start("broker-a")
    nodes.start("broker-a", role="SLAVE", broker_id=1)
    nodes.start("broker-b", role="SLAVE", broker_id=1)  # no live master
    cluster = settings.BROKER_CLUSTER
    gone = f"node broker-zz is not a live node in cluster {cluster}"
    operator, admin = client_as("operator"), client_as("admin")
    tid = "7F" * 16

    def said(r) -> str:
        assert r.status_code == 200
        return r.content.decode()

    body = said(operator.post(
        "/cluster/delays/cancel/",
        {"node": "broker-zz", "msg_id": "0102FC" * 5, "reason": "gone"}, follow=True,
    ))  # fmt: skip
    assert f"failed (404 node_not_found): {gone}" in body
    body = said(operator.post(
        f"/cluster/broker-zz/halves/{tid}/rollback/", {"reason": "gone"}, follow=True
    ))  # fmt: skip
    assert f"failed (404 node_not_found): {gone}" in body
    body = said(operator.post(
        "/cluster/consumers/reset/",
        {"node": "broker-zz", "group": "GN1", "topic": "TN1", "offset": "0",
         "reason": "gone"}, follow=True,
    ))  # fmt: skip
    assert f"failed (404 node_not_found): {gone}" in body
    body = said(admin.post(
        "/cluster/topics/", {"topic": "TZ", "queues": "2", "nodes": ["broker-zz"]},
        follow=True,
    ))  # fmt: skip
    assert f"broker-zz: failed (404 node_not_found): {gone}" in body
    # A broker whose only live node is a slave: no master to act on.
    body = said(operator.post(
        "/cluster/consumers/reset/",
        {"node": "broker-b", "group": "GN1", "topic": "TN1", "offset": "0",
         "reason": "no master"}, follow=True,
    ))  # fmt: skip
    assert (
        f"node broker-b is not a live master in cluster {cluster} (its live node "
        "is broker-b:1, a SLAVE)" in body
    )
    # Promoting a node that is not live, or a master.
    for key in ("broker-zz:1", "broker-a:0"):
        promote = {"role": "ASYNC_MASTER", "reason": "try", "confirm": "PROMOTE"}
        admin.post(f"/cluster/nodes/{key}/promote/", promote)

    got = {
        (r.action, r.object_id): r
        for r in AuditRecord.objects.filter(status=AuditRecord.Status.FAILED)
    }
    assert set(got) == {
        ("delay.cancel", f"broker-zz/{'0102FC' * 5}"),
        ("transaction.rollback", f"broker-zz/{tid}"),
        ("consumer_group.reset_offset", "broker-zz/GN1@TN1"),
        ("topic.create", "broker-zz/TZ"),
        ("consumer_group.reset_offset", "broker-b/GN1@TN1"),
        ("cluster.promote", "broker-zz:1"),
        ("cluster.promote", "broker-a:0"),
    }
    for (_, object_id), rec in got.items():
        if object_id.startswith("broker-zz/"):
            assert rec.message == f"NodeNotFoundError: {gone}", object_id
    assert got[("cluster.promote", "broker-zz:1")].message == (
        f"NodeNotFoundError: node broker-zz:1 is not a live node in cluster {cluster}"
    )
    assert "already a master" in got[("cluster.promote", "broker-a:0")].message
    assert AuditRecord.objects.count() == len(got)  # nothing else, no success


def test_the_create_topic_form_refuses_a_topic_that_exists(nodes, client_as):
    a = nodes.start("broker-a")
    b = nodes.start("broker-b")
    a.create_topic("orders", 4, 4)
    r = client_as("admin").post(
        "/cluster/topics/",
        {"topic": "orders", "queues": "8", "nodes": ["broker-a", "broker-b"]},
        follow=True,
    )
    body = r.content.decode()
    assert (
        "broker-a: failed (409 topic_exists): topic &#x27;orders&#x27; already "
        "exists; broker-b: created" in body
    )
    assert a.store.get_topic("orders").write_queue_nums == 4  # not resized
    assert b.store.get_topic("orders").write_queue_nums == 8
    got = {
        (r.action, r.object_id, r.status)
        for r in AuditRecord.objects.filter(object_type="topic")
    }
    assert got == {
        ("topic.create", "broker-a/orders", "failed"),
        ("topic.create", "broker-b/orders", "success"),
    }
    assert not AuditRecord.objects.filter(action="topic.update").exists()
