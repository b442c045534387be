"""The console's Cluster page over real nodes (stores with their admin API on
127.0.0.1, a real route registry): every node is asked at once, and a node
that never answers is named on the page without holding it up per node."""

from __future__ import annotations

import re
import time

import pytest

from broker_core import Message
from broker_core.transaction import TransactionService

pytestmark = [pytest.mark.services, pytest.mark.django_db]


def test_silent_nodes_are_asked_at_once_and_named(nodes, client_as, settings):
    settings.CLUSTER_ADMIN_TIMEOUT_S = 1.0
    broker = nodes.start("broker-a")
    tx = TransactionService(broker)
    tid = tx.send_half("PID_shop", Message("orders", b"x", keys="k1")).transaction_id
    tx.close()
    names = [f"broker-s{i}" for i in range(3)]
    silent = nodes.silent(*names)

    r = client_as("viewer").get("/cluster/")
    body = r.content.decode()

    assert r.status_code == 200
    # The live master's half is listed; each silent node is named, not dropped.
    assert f'data-tid="{tid}" data-node="broker-a"' in body
    for name in names:
        assert f"Not reachable: {name} (ASYNC_MASTER)" in body
        assert f'data-node="{name}:0"' in body
    # The three silent nodes held their requests open at the same time: their
    # timeouts overlap (one total wait for the page), they do not add up.
    assert silent.most_open == 3


def _cells(body: str, table: str, attrs: tuple[str, ...], cell: str) -> set[tuple]:
    """(each of ``attrs``, the ``cell`` value) of every row of a table."""
    part = body.split(f'data-testid="{table}"', 1)[1].split("</table>", 1)[0]
    found = set()
    for row in re.findall(r"<tr (data-[^>]*)>(.*?)</tr>", part, re.S):
        data = dict(re.findall(r'data-([\w-]+)="([^"]*)"', row[0]))
        value = re.search(rf'data-testid="{cell}">([^<]*)<', row[1]).group(1)
        found.add((*(data[a] for a in attrs), int(value.replace(",", ""))))
    return found


def _consume(broker, group, qid, count):
    got = broker.pull(group, "events", qid, 0, max_messages=count)
    assert len(got.messages) == count
    broker.commit_offset(group, "events", qid, got.next_offset)


def test_lag_and_delays_of_every_master(nodes, client_as):
    a = nodes.start("broker-a")
    b = nodes.start("broker-b")
    # broker-a's slave reports only its replication: what its own store holds
    # is never counted (here a group of its own).
    s = nodes.start("broker-a", role="SLAVE", broker_id=1)
    for broker in (a, b, s):
        broker.create_topic("events", 2)
    a.send_batch([Message("events", b"a%d" % i, queue_id=i % 2) for i in range(20)])
    b.send_batch([Message("events", b"b%d" % i, queue_id=0) for i in range(7)])
    s.send(Message("events", b"s", queue_id=0))
    _consume(a, "analytics", 0, 4)  # 6 behind on queue 0, 10 on queue 1
    _consume(b, "analytics", 0, 7)  # caught up on broker-b
    _consume(b, "billing", 0, 2)  # 5 behind
    s.commit_offset("slave-only", "events", 0, 0)

    now = int(time.time() * 1000)
    da, db = nodes.endpoints["broker-a:0"].delays, nodes.endpoints["broker-b:0"].delays
    for i in range(2):
        da.send_delayed(Message("orders", b"a-l3-%d" % i), level=3)
    db.send_delayed(Message("orders", b"b-l3"), level=3)
    for i in range(4):
        db.send_delayed(Message("orders", b"b-l5-%d" % i), level=5)
    da.send_delayed(Message("orders", b"a-timer"), deliver_at_ms=now + 3_600_000)
    nodes.endpoints["broker-a:1"].delays.send_delayed(Message("orders", b"s"), level=3)

    r = client_as("viewer").get("/cluster/")
    assert r.status_code == 200
    body = r.content.decode()
    assert "Not reachable" not in body
    assert _cells(body, "cluster-lag", ("group", "topic", "node"), "lag") == {
        ("analytics", "events", "broker-a", 16),
        ("analytics", "events", "broker-b", 0),
        ("billing", "events", "broker-b", 5),
    }
    assert _cells(body, "cluster-delays", ("kind", "level", "node"), "scheduled") == {
        ("level", "3", "broker-a", 2),
        ("level", "3", "broker-b", 1),
        ("level", "5", "broker-b", 4),
        ("timer", "0", "broker-a", 1),
    }
    # Most behind first; levels in order, then the timers.
    lag_rows = re.findall(
        r'<tr data-group="(\w+)" data-topic="\w+" data-node="([\w-]+)"', body
    )
    assert lag_rows[0] == ("analytics", "broker-a")
    delay_rows = re.findall(
        r'<tr data-kind="(\w+)" data-level="(\d+)" data-node="([\w-]+)"', body
    )
    assert delay_rows == [
        ("level", "3", "broker-a"),
        ("level", "3", "broker-b"),
        ("level", "5", "broker-b"),
        ("timer", "0", "broker-a"),
    ]


def test_single_store_pages_say_which_store_they_show(client_as, settings):
    viewer = client_as("viewer")
    settings.BROKER_CLUSTER = ""
    assert 'data-testid="store-scope"' not in viewer.get("/topics/").content.decode()
    settings.BROKER_CLUSTER = "c1"
    settings.BROKER_NODE = "broker-a"
    for url in ("/", "/topics/", "/messages/", "/consumer-groups/", "/delays/",
                "/transactions/", "/producer-groups/"):  # fmt: skip
        body = viewer.get(url).content.decode()
        assert 'data-testid="store-scope"' in body, url
        assert "node <strong>broker-a</strong>'s store" in body, url
    for url in ("/cluster/", "/audit/", "/reports/"):
        body = viewer.get(url).content.decode()
        assert 'data-testid="store-scope"' not in body, url
