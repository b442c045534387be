"""The Cluster page's message search over every broker at once: a message is
found on whichever node stores it, and a node that does not answer is named."""

from __future__ import annotations

import pytest

from broker_core import Message

pytestmark = [pytest.mark.services, pytest.mark.django_db]


def test_a_message_is_found_without_knowing_its_node(nodes, client_as, settings):
    settings.CLUSTER_ADMIN_TIMEOUT_S = 1.0
    a = nodes.start("broker-a")
    b = nodes.start("broker-b")
    nodes.start("broker-b", role="SLAVE", broker_id=1)  # not searched twice
    for broker in (a, b):
        broker.create_topic("orders", 1, 1)
    a.send(Message("orders", b"1", keys="order-1"))
    on_b = b.send(Message("orders", b"2", keys="order-2")).msg_id
    viewer = client_as("viewer")

    body = viewer.get("/cluster/", {"search_node": "*", "msg_id": on_b}).content
    rows = body.decode().split('data-testid="cluster-messages"')[1]
    assert f'data-node="broker-b:0" data-msg-id="{on_b}"' in rows
    assert rows.count("data-msg-id=") == 1

    body = viewer.get("/cluster/", {"search_node": "*", "topic": "orders"}).content
    rows = body.decode().split('data-testid="cluster-messages"')[1]
    assert rows.count("data-msg-id=") == 2
    assert 'data-node="broker-a:0"' in rows and 'data-node="broker-b:0"' in rows

    nodes.silent("broker-s")
    body = viewer.get("/cluster/", {"search_node": "*", "topic": "orders"}).content
    page = body.decode()
    assert page.split('data-testid="cluster-messages"')[1].count("data-msg-id=") == 2
    assert 'data-testid="search-note"' in page and "broker-s:0" in page
