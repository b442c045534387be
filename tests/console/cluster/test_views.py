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
        assert (
            f"node {name}:0 (http://127.0.0.1:{silent.port}) did not answer: "
            "no answer within 1 s" in body
        )
        assert f'data-node="{name}:0"' in body
    # The three silent nodes held their requests open at the same time: their
    # timeouts overlap (one total wait for the page), they do not add up.
    # Every read of every master is asked at once (status, halves, lag, delays).
    from console.cluster.state import MASTER_READS, NODE_READS

    assert silent.most_open == 3 * len(NODE_READS | MASTER_READS)


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
        assert 'data-testid="scope-node">broker-a</strong>\'s store' in body, url
    for url in ("/cluster/", "/audit/", "/reports/"):
        body = viewer.get(url).content.decode()
        assert 'data-testid="store-scope"' not in body, url


def test_a_registry_that_does_not_answer_is_said_not_a_server_error(
    client_as, settings
):
    # A port nothing listens on: the registry's Redis is down.
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    settings.BROKER_CLUSTER = "c-down"
    settings.REGISTRY_URL = f"redis://127.0.0.1:{port}/0"
    settings.CLUSTER_ADMIN_TOKEN_FILE = "/nonexistent"
    admin = client_as("admin")
    r = admin.get("/cluster/", {"search_node": "broker-a:0", "topic": "orders"})
    assert r.status_code == 200
    body = r.content.decode()
    assert "Not reachable: the route registry" in body
    assert (
        "Search: broker-a:0: the route registry of cluster c-down did not answer"
        in body
    )
    for url, data in (
        ("/cluster/consumers/reset/", {"node": "broker-a", "group": "g",
                                       "topic": "t", "offset": "0", "reason": "why"}),
        ("/cluster/delays/cancel/", {"node": "broker-a", "msg_id": "AB" * 16,
                                     "reason": "why"}),
        ("/cluster/nodes/broker-a:1/promote/", {"role": "ASYNC_MASTER",
                                                "reason": "why", "confirm": "PROMOTE"}),
        ("/cluster/broker-a/halves/ABCD/rollback/", {"reason": "why"}),
    ):  # fmt: skip
        r = admin.post(url, data, follow=True)
        assert r.status_code == 200, url
        said = r.content.decode()
        assert "the route registry of cluster c-down did not answer" in said, url


def test_a_node_slow_on_one_read_keeps_its_other_answers(
    nodes, client_as, settings, monkeypatch
):
    from broker_core.cluster.node_ops import NodeUnavailableError, RemoteNodeOps
    from console.cluster import nodes as cluster_nodes
    from console.cluster import state

    settings.CLUSTER_ADMIN_TIMEOUT_S = 1.0
    broker = nodes.start("broker-a")
    tx = TransactionService(broker)
    tid = tx.send_half("PID_shop", Message("orders", b"x")).transaction_id
    tx.close()
    key = "broker-a:0"
    base = cluster_nodes.find("broker-a", 0).admin
    calls = {key: (base, state.NODE_READS | state.MASTER_READS)}
    got = cluster_nodes.ask_nodes(calls)
    assert isinstance(got[key], dict)
    assert not any(isinstance(a, Exception) for a in got[key].values())
    # broker-a answers every read but its delay levels, which come from a node
    # that hangs (a long delay backlog, a stuck lock): the read is given the
    # fan-out's share of the deadline, as every other read.
    silent = nodes.silent("broker-q")
    slow = f"http://127.0.0.1:{silent.port}"

    def slow_delays(ops):
        return RemoteNodeOps(slow, ops.token, ops.timeout).delay_stats()

    monkeypatch.setitem(state.MASTER_READS, "delay_stats", slow_delays)
    started = time.monotonic()
    got = cluster_nodes.ask_nodes({key: (base, state.NODE_READS | state.MASTER_READS)})
    assert time.monotonic() - started < 1.0 + 1.5
    body = client_as("viewer").get("/cluster/").content.decode()
    answers = got[key]
    assert isinstance(answers, dict)
    assert isinstance(answers["delay_stats"], NodeUnavailableError)
    assert answers["delay_stats"].status is None
    assert answers["node_status"]["log_end"] > 0
    assert f'data-tid="{tid}" data-node="broker-a"' in body
    assert "delay_stats: node broker-a:0 (http://" in body
    assert "did not answer: no answer within" in body
    assert "node_status: node broker-a:0" not in body


def test_the_banner_says_what_is_wrong_with_the_cluster(nodes, client_as, settings):
    from broker_core.cluster import NodeInfo
    from console.core.alerts import current_alerts, reset_cache

    nodes.start("broker-a")
    # broker-b's master is gone: only its slave heartbeats.
    nodes.start("broker-b", role="SLAVE", broker_id=1)
    # broker-a's slave is 5,000 bytes behind (the limit set low below).
    nodes.registry.register(
        NodeInfo(nodes.registry.cluster, "broker-a", 1, "SLAVE",
                 endpoints=["broker-a.invalid:8081"], log_end=1000,
                 master_log_end=6000)
    )  # fmt: skip
    settings.CLUSTER_NODES = ["broker-a", "broker-b", "broker-c"]
    settings.CLUSTER_LAG_WARN_BYTES = 4096
    settings.BROKER_NODE = ""
    reset_cache()
    titles = [a.title for a in current_alerts()]
    assert "Node broker-c is not registered" in titles
    assert "broker-b has no live master" in titles
    assert "broker-a has no live master" not in titles
    assert "broker-a:1 is 5,000 bytes behind its master" in titles
    # A console that only manages the cluster has no endpoint of its own.
    assert "The gRPC endpoint is down" not in titles
    page = client_as("viewer").get("/topics/").content.decode()
    assert "broker-b has no live master" in page

    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    settings.REGISTRY_URL = f"redis://127.0.0.1:{port}/0"
    reset_cache()
    assert "The route registry is unreachable" in [a.title for a in current_alerts()]
    reset_cache()


def test_the_banner_names_a_stalled_or_disconnected_slave(nodes, settings):
    """As the master reports its slaves in its registration: a stalled slave
    (connected, acking nothing) and one whose link dropped each get a warning
    with how far behind they are; one that acks gets none."""
    from broker_core.cluster import NodeInfo
    from console.core.alerts import current_alerts, reset_cache

    slaves = [
        {"node": "broker-a/1@10.0.0.2:8081", "address": "10.0.0.2:40001",
         "lag_bytes": 2048, "stalled_s": 7.5, "connected": True},
        {"node": "broker-a/2@10.0.0.3:8081", "address": "10.0.0.3:40002",
         "lag_bytes": 3 << 20, "stalled_s": None, "connected": False,
         "disconnected_ms": 1},
        {"node": "broker-a/3@10.0.0.4:8081", "address": "10.0.0.4:40003",
         "lag_bytes": 0, "stalled_s": None, "connected": True},
    ]  # fmt: skip
    nodes.registry.register(
        NodeInfo(nodes.registry.cluster, "broker-a", 0, "SYNC_MASTER",
                 endpoints=["broker-a.invalid:8081"], slaves=slaves)
    )  # fmt: skip
    settings.BROKER_NODE = ""
    reset_cache()
    alerts = {a.title: a for a in current_alerts()}
    stalled = alerts["The slave broker-a/1@10.0.0.2:8081 of broker-a is stalled"]
    assert "nothing for 8 s" in stalled.meaning and "2,048 bytes" in stalled.meaning
    gone = alerts["The slave broker-a/2@10.0.0.3:8081 of broker-a is disconnected"]
    assert "3 MiB behind" in gone.meaning
    assert not [t for t in alerts if "broker-a/3" in t]
    reset_cache()


def test_the_banner_says_what_a_failover_lost(nodes, settings):
    """The old master rejoined as a slave and cut what its new master never
    had: the banner says how many client messages and where their ids are,
    for a day."""
    import time

    from broker_core.cluster import NodeInfo
    from console.core.alerts import current_alerts, reset_cache

    now = int(time.time() * 1000)
    cut = {"from": 1000, "to": 9192, "messages": 42, "client_messages": 40,
           "file": "/var/lib/broker/store/ha/cut/a-b.json"}  # fmt: skip
    nodes.registry.register(
        NodeInfo(nodes.registry.cluster, "broker-a", 1, "SLAVE",
                 endpoints=["broker-a.invalid:8081"],
                 cut_tails=[{**cut, "cut_at_ms": now - 60_000},
                            {**cut, "client_messages": 7,
                             "cut_at_ms": now - 2 * 86_400_000}])
    )  # fmt: skip
    settings.BROKER_NODE = ""
    reset_cache()
    alerts = {a.title: a for a in current_alerts()}
    lost = alerts["broker-a:1 lost 40 client messages in a failover"]
    assert "8,192 bytes" in lost.meaning and cut["file"] in lost.action
    assert "broker-a:1 lost 7 client messages in a failover" not in alerts
    reset_cache()


def test_the_token_goes_only_to_the_admin_hosts_allowed(nodes, client_as, settings):
    nodes.start("broker-a")
    settings.CLUSTER_ADMIN_HOSTS = ["10.9.9.9", "admin.example"]
    body = client_as("viewer").get("/cluster/").content.decode()
    assert "127.0.0.1 is not in CLUSTER_ADMIN_HOSTS" in body
    settings.CLUSTER_ADMIN_HOSTS = ["10.9.9.9", "127.0.0.0/8"]
    body = client_as("viewer").get("/cluster/").content.decode()
    assert "CLUSTER_ADMIN_HOSTS" not in body
    assert "Not reachable" not in body


def test_no_call_of_the_console_sends_the_token_outside_the_admin_hosts(
    nodes, client_as, settings
):
    """A node registered with an admin URL outside ``CLUSTER_ADMIN_HOSTS``
    (a real server that records every request): the Cluster page, its node
    page, a search on it, the node picker and a promotion of it all say why
    and never send it a request, so never the token."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    seen: list[str] = []

    class Recorder(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            seen.append(self.headers.get("Authorization", ""))
            self.send_error(500)

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        nodes.register("broker-x", f"http://127.0.0.1:{server.server_port}")
        nodes.register("broker-x", f"http://127.0.0.1:{server.server_port}",
                       role="SLAVE", broker_id=1)  # fmt: skip
        settings.CLUSTER_ADMIN_HOSTS = ["10.9.9.9"]
        refused = "127.0.0.1 is not in CLUSTER_ADMIN_HOSTS"
        admin = client_as("admin")
        assert refused in admin.get("/cluster/").content.decode()
        assert refused in admin.get("/cluster/nodes/broker-x:0/").content.decode()
        found = admin.get("/cluster/", {"search_node": "broker-x:0", "topic": "t"})
        assert refused in found.content.decode()
        admin.post("/cluster/pick/", {"node": "broker-x", "next": "/topics/"})
        assert refused in admin.get("/topics/").content.decode()
        r = admin.post("/cluster/nodes/broker-x:1/promote/",
                       {"role": "ASYNC_MASTER", "reason": "host lost",
                        "confirm": "PROMOTE"}, follow=True)  # fmt: skip
        assert refused in r.content.decode()
        assert seen == []
    finally:
        server.shutdown()
        server.server_close()
