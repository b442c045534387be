"""The Cluster page's node actions over real nodes (stores with their admin
API on 127.0.0.1, a real route registry): a message search on a chosen node,
an offset reset and a delayed message's cancel on a chosen master, each going
to that node only, audited, and refused to viewers."""

from __future__ import annotations

import re

import pytest

from broker_core import Message
from console.audit.models import AuditRecord

pytestmark = [pytest.mark.services, pytest.mark.django_db]


def _found(body: str) -> list[tuple[str, str]]:
    """(node key, message id) of every row of the search results."""
    part = body.split('data-testid="cluster-messages"', 1)[1].split("</table>")[0]
    return re.findall(r'<tr data-node="([^"]+)" data-msg-id="([^"]+)">', part)


def test_search_finds_a_message_on_its_node_only(nodes, client_as):
    a = nodes.start("broker-a")
    b = nodes.start("broker-b")
    s = nodes.start("broker-a", role="SLAVE", broker_id=1)
    for broker in (a, b, s):
        broker.create_topic("orders", 2)
    on_a = a.send(Message("orders", b"a", keys="order-1"))
    on_b = b.send(Message("orders", b"b", keys="order-2"))
    on_s = s.send(Message("orders", b"s", keys="order-1"))
    viewer = client_as("viewer")

    def search(node, **query):
        r = viewer.get("/cluster/", {"search_node": node, **query})
        assert r.status_code == 200
        return r.content.decode()

    body = search("broker-b:0", topic="orders", key="order-2")
    assert _found(body) == [("broker-b:0", on_b.msg_id)]
    body = search("broker-a:0", topic="orders", key="order-2")
    assert _found(body) == [] and "Nothing found on broker-a:0" in body
    # By message id: on its node, and nowhere else (the node's 404 is shown).
    assert _found(search("broker-b:0", msg_id=on_b.msg_id)) == [
        ("broker-b:0", on_b.msg_id)
    ]
    body = search("broker-a:0", msg_id=on_b.msg_id)
    assert _found(body) == [] and "no message" in body
    # A slave is searched in its own store.
    assert _found(search("broker-a:1", topic="orders", key="order-1")) == [
        ("broker-a:1", on_s.msg_id)
    ]
    assert _found(search("broker-a:0", topic="orders", key="order-1")) == [
        ("broker-a:0", on_a.msg_id)
    ]
    # Bad input and unknown nodes are said, not searched.
    assert "Give a message id, or a topic" in search("broker-a:0")
    assert "broker-z:0 is not a live node" in search("broker-z:0", topic="orders")


def _consume(broker, group, count):
    got = broker.pull(group, "events", 0, 0, max_messages=count)
    assert len(got.messages) == count
    broker.commit_offset(group, "events", 0, got.next_offset)


def test_reset_moves_the_offset_on_that_node_only(nodes, client_as):
    a = nodes.start("broker-a")
    b = nodes.start("broker-b")
    for broker in (a, b):
        broker.create_topic("events", 1)
        broker.send_batch([Message("events", b"e%d" % i) for i in range(10)])
        _consume(broker, "analytics", 10)

    r = client_as("operator").post(
        "/cluster/consumers/reset/",
        {"node": "broker-b", "group": "analytics", "topic": "events",
         "offset": "3", "queue_id": "0", "reason": "replay the import"},
    )  # fmt: skip
    assert r.status_code == 302
    assert b.committed_offset("analytics", "events", 0) == 3
    assert a.committed_offset("analytics", "events", 0) == 10
    rec = AuditRecord.objects.get()
    assert (rec.action, rec.object_id, rec.status, rec.actor_username) == (
        "consumer_group.reset_offset", "broker-b/analytics@events", "success",
        "operator",
    )  # fmt: skip
    # As the group page audits its own reset: one format whichever page acted.
    assert rec.reason == "replay the import"
    assert rec.after["offsets"] == {"0": 3} and rec.before == {"0": 10}
    # The lag the page shows follows: 7 behind on broker-b, none on broker-a.
    body = client_as("viewer").get("/cluster/").content.decode()
    assert re.search(
        r'data-group="analytics" data-topic="events" data-node="broker-b">.*?'
        r'data-testid="lag">7<',
        body,
        re.S,
    )

    # A group the node does not know: refused by the node, audited as failed.
    r = client_as("operator").post(
        "/cluster/consumers/reset/",
        {"node": "broker-a", "group": "nobody", "topic": "events", "offset": "0",
         "reason": "typo"},
        follow=True,
    )  # fmt: skip
    assert "&#x27;nobody&#x27; does not consume &#x27;events&#x27; on this node" in (
        r.content.decode()
    )
    failed = AuditRecord.objects.get(object_id="broker-a/nobody@events")
    assert failed.status == "failed"
    # Neither an offset nor a time: not sent.
    r = client_as("operator").post(
        "/cluster/consumers/reset/",
        {"node": "broker-a", "group": "analytics", "topic": "events",
         "reason": "why"},
        follow=True,
    )  # fmt: skip
    assert "Give either an offset or a time" in r.content.decode()
    assert a.committed_offset("analytics", "events", 0) == 10


def test_cancel_removes_the_delayed_message_on_that_node(nodes, client_as):
    nodes.start("broker-a")
    nodes.start("broker-b")
    da = nodes.endpoints["broker-a:0"].delays
    db = nodes.endpoints["broker-b:0"].delays
    on_a = da.send_delayed(Message("orders", b"a"), level=3)
    on_b = db.send_delayed(Message("orders", b"b"), level=3)

    r = client_as("operator").post(
        "/cluster/delays/cancel/",
        {"node": "broker-b", "msg_id": on_b.msg_id, "reason": "order withdrawn"},
        follow=True,
    )  # fmt: skip
    assert f"Cancelled {on_b.msg_id} on broker-b" in r.content.decode()
    assert [m.msg_id for m in db.list_scheduled()] == []
    assert [m.msg_id for m in da.list_scheduled()] == [on_a.msg_id]
    rec = AuditRecord.objects.get()
    assert (rec.action, rec.object_id, rec.status) == (
        "delay.cancel", f"broker-b/{on_b.msg_id}", "success"
    )  # fmt: skip
    assert rec.after["kind"] == "level" and rec.after["level"] == 3
    # broker-a's message is not on broker-b: the node says so, and it stays.
    r = client_as("operator").post(
        "/cluster/delays/cancel/",
        {"node": "broker-b", "msg_id": on_a.msg_id, "reason": "wrong node"},
        follow=True,
    )  # fmt: skip
    # (The console's own wording of the library's errors, as on the delays page.)
    assert f"no scheduled message with id &#x27;{on_a.msg_id}&#x27;" in (
        r.content.decode()
    )
    assert [m.msg_id for m in da.list_scheduled()] == [on_a.msg_id]
    # Cancelled already: a conflict.
    r = client_as("operator").post(
        "/cluster/delays/cancel/",
        {"node": "broker-b", "msg_id": on_b.msg_id, "reason": "again"},
        follow=True,
    )  # fmt: skip
    assert f"message &#x27;{on_b.msg_id}&#x27; was already recalled" in (
        r.content.decode()
    )
    assert AuditRecord.objects.filter(status="failed").count() == 2


def test_a_viewer_is_refused_the_actions(nodes, client_as):
    b = nodes.start("broker-b")
    b.create_topic("events", 1)
    b.send_batch([Message("events", b"e%d" % i) for i in range(4)])
    _consume(b, "analytics", 4)
    delayed = nodes.endpoints["broker-b:0"].delays.send_delayed(
        Message("orders", b"b"), level=3
    )
    viewer = client_as("viewer")

    body = viewer.get("/cluster/").content.decode()
    assert 'data-testid="reset-form"' not in body
    assert 'data-testid="cancel-form"' not in body
    assert 'data-testid="search-form"' in body
    r = viewer.post(
        "/cluster/consumers/reset/",
        {"node": "broker-b", "group": "analytics", "topic": "events",
         "offset": "0", "reason": "not mine"},
        follow=True,
    )  # fmt: skip
    assert "needs the operator role" in r.content.decode()
    r = viewer.post(
        "/cluster/delays/cancel/",
        {"node": "broker-b", "msg_id": delayed.msg_id, "reason": "not mine"},
        follow=True,
    )  # fmt: skip
    assert "needs the operator role" in r.content.decode()
    assert b.committed_offset("analytics", "events", 0) == 4
    assert [
        m.msg_id for m in nodes.endpoints["broker-b:0"].delays.list_scheduled()
    ] == [delayed.msg_id]
    assert not AuditRecord.objects.exists()
    body = client_as("operator").get("/cluster/").content.decode()
    assert 'data-testid="reset-form"' in body and 'data-testid="cancel-form"' in body


def test_a_discarded_half_is_listed_and_resumed_on_its_node(nodes, client_as):
    from broker_core.transaction import TransactionService, TransactionState

    a = nodes.start("broker-a")
    b = nodes.start("broker-b")
    ids = {}
    for name, broker in (("broker-a", a), ("broker-b", b)):
        tx = TransactionService(broker)
        ids[name] = tx.send_half("PID_shop", Message("orders", b"x")).transaction_id
        tx.close()
    # broker-b's checks gave up on its half (its producer never answered).
    svc = nodes.endpoints["broker-b:0"].tx
    assert svc.discard(svc.locate(ids["broker-b"]), "max checks", 0) == "discarded"

    body = client_as("viewer").get("/cluster/").content.decode()
    part = body.split('data-testid="cluster-discarded"', 1)[1].split("</table>")[0]
    assert f'data-tid="{ids["broker-b"]}" data-node="broker-b"' in part
    assert ids["broker-a"] not in part
    assert "Resume" not in part  # a viewer sees no action

    url = f"/cluster/broker-b/halves/{ids['broker-b']}/resume/"
    refused = client_as("viewer").post(url, {"reason": "retry it"}, follow=True)
    assert "needs the operator role" in refused.content.decode()
    done = client_as("operator").post(url, {"reason": "checker fixed"}, follow=True)
    assert f"Resumed {ids['broker-b']} on broker-b." in done.content.decode()
    assert svc.state(ids["broker-b"]) == TransactionState.PENDING
    record = AuditRecord.objects.get(action="transaction.resume")
    assert record.object_id == f"broker-b/{ids['broker-b']}"
    assert record.status == AuditRecord.Status.SUCCESS
    body = client_as("viewer").get("/cluster/").content.decode()
    assert 'data-testid="cluster-discarded"' not in body
