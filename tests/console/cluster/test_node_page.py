"""The page of one node (``/cluster/nodes/<name:id>/``) over real nodes: a
``serve`` process that real gRPC clients send to and consume from beside an
in-process node, a node that never answers, a key nobody registered."""

from __future__ import annotations

import re
import threading
import time

import pytest

import broker_core
from broker_core import Message

pytestmark = [pytest.mark.services, pytest.mark.django_db]

PRODUCER_ID = "node-page-producer@host-b"
CONSUMER_ID = "node-page-consumer@host-b"


def _row(body: str, table: str, attr: str, value: str) -> str:
    """The row of ``table`` whose ``data-<attr>`` is ``value`` ('' if none)."""
    part = body.split(f'data-testid="{table}"', 1)[1].split("</table>", 1)[0]
    found = re.search(
        rf'<tr data-{attr}="{re.escape(value)}"[^>]*>(.*?)</tr>', part, re.S
    )
    return found.group(1) if found else ""


def _counter(body: str, key: str) -> int | None:
    """A metric tile's figure (None: shown as not reported)."""
    found = re.search(
        rf'data-counter="{key}"[^>]*><div class="v" data-testid="counter">([^<]*)<',
        body,
    )
    assert found, key
    text = found.group(1)
    return None if text == "—" else int(text.replace(",", ""))


def _lag(body: str) -> dict[tuple[str, str], int]:
    """The lag table's queues summed per group and topic."""
    part = body.split('data-testid="node-lag"', 1)[1].split("</table>", 1)[0]
    out: dict[tuple[str, str], int] = {}
    for group, topic, lag in re.findall(
        r'<tr data-group="([^"]*)" data-topic="([^"]*)".*?data-testid="lag">([\d,]+)<',
        part,
        re.S,
    ):
        out[(group, topic)] = out.get((group, topic), 0) + int(lag.replace(",", ""))
    return out


class _Clients:
    """A producer (a Telemetry stream with its settings, kept open: online)
    and a simple consumer (a Heartbeat) on one node, over raw gRPC as the
    official clients call it."""

    def __init__(self, access: str) -> None:
        import grpc
        from rocketmq.grpc_protocol import definition_pb2 as pb
        from rocketmq.grpc_protocol import service_pb2 as spb
        from rocketmq.grpc_protocol import service_pb2_grpc as sgrpc

        self.pb, self.spb = pb, spb
        self.channel = grpc.insecure_channel(access)
        self.stub = sgrpc.MessagingServiceStub(self.channel)
        self._closed = threading.Event()
        self.streams: list = []

    def _telemetry(self, cid: str, settings) -> None:
        """Open ``cid``'s Telemetry stream with ``settings``, kept open."""
        spb = self.spb

        def commands():
            yield spb.TelemetryCommand(settings=settings)
            self._closed.wait()

        stream = self.stub.Telemetry(commands(), metadata=(("x-mq-client-id", cid),))
        self.streams.append(stream)
        # The endpoint answers the settings once it has recorded them.
        assert next(stream).HasField("settings")

    def producer(self, topic: str) -> None:
        pb = self.pb
        settings = pb.Settings(
            client_type=pb.PRODUCER,
            user_agent=pb.UA(language=pb.PYTHON, version="5.0.9"),
        )
        settings.publishing.topics.add(name=topic)
        self._telemetry(PRODUCER_ID, settings)

    def send(self, topic: str, count: int) -> None:
        pb, spb = self.pb, self.spb
        for i in range(count):
            msg = pb.Message(topic=pb.Resource(name=topic), body=b"m%d" % i)
            msg.system_properties.message_type = pb.NORMAL
            r = self.stub.SendMessage(
                spb.SendMessageRequest(messages=[msg]),
                metadata=(("x-mq-client-id", PRODUCER_ID),),
                timeout=10,
            )
            assert r.status.code == 20000, r.status

    def consume(self, group: str, topic: str, count: int) -> None:
        """Subscribe as a simple consumer of ``group``, heartbeat, receive
        and ack ``count``."""
        pb, spb = self.pb, self.spb
        settings = pb.Settings(
            client_type=pb.SIMPLE_CONSUMER,
            user_agent=pb.UA(language=pb.JAVA, version="5.0.7"),
        )
        settings.subscription.group.name = group
        settings.subscription.subscriptions.add().topic.name = topic
        self._telemetry(CONSUMER_ID, settings)
        md = (("x-mq-client-id", CONSUMER_ID),)
        self.stub.Heartbeat(
            spb.HeartbeatRequest(
                group=pb.Resource(name=group), client_type=pb.SIMPLE_CONSUMER
            ),
            metadata=md,
        )
        got = 0
        deadline = time.monotonic() + 30
        while got < count:
            assert time.monotonic() < deadline, f"received {got} of {count}"
            req = spb.ReceiveMessageRequest(
                group=pb.Resource(name=group),
                message_queue=pb.MessageQueue(topic=pb.Resource(name=topic)),
                filter_expression=pb.FilterExpression(type=pb.TAG, expression="*"),
                batch_size=count,
            )
            req.invisible_duration.FromSeconds(30)
            req.long_polling_timeout.FromSeconds(1)
            for r in self.stub.ReceiveMessage(req, metadata=md, timeout=10):
                if not r.HasField("message"):
                    continue
                sp = r.message.system_properties
                ack = spb.AckMessageRequest(
                    group=pb.Resource(name=group),
                    topic=pb.Resource(name=topic),
                    entries=[
                        spb.AckMessageEntry(
                            message_id=sp.message_id, receipt_handle=sp.receipt_handle
                        )
                    ],
                )
                done = self.stub.AckMessage(ack, metadata=md, timeout=10)
                assert done.status.code == 20000, done.status
                got += 1

    def close(self) -> None:
        self._closed.set()
        for stream in self.streams:
            stream.cancel()
        self.channel.close()


@pytest.mark.protocol
def test_a_node_page_shows_that_node_only(nodes, client_as):
    from broker_core.endpoint.clients import ClientInfo
    from console.cluster.nodes import ops_of

    a = nodes.start("broker-a")
    a.create_topic("payments-a", 2)
    a.send(Message("payments-a", b"p"))
    # A client in broker-a's endpoint table, recorded as its Heartbeat does.
    nodes.endpoints["broker-a:0"].clients["only-on-a"] = ClientInfo(
        "only-on-a", client_type="PRODUCER", topics=["payments-a"]
    )
    access = nodes.serve("broker-b")
    done = ops_of("broker-b:0").create_topic("orders-b", 2, 2, 6, "NORMAL")
    assert done.topic_name == "orders-b"
    clients = _Clients(access)
    try:
        clients.producer("orders-b")
        clients.send("orders-b", 5)
        clients.consume("GID_node_page", "orders-b", 3)

        viewer = client_as("viewer")
        # The acks are committed as offsets after they are answered: wait
        # for the 2 messages not consumed yet.
        deadline = time.monotonic() + 20
        while True:
            r = viewer.get("/cluster/nodes/broker-b:0/")
            body = r.content.decode()
            if _lag(body) == {("GID_node_page", "orders-b"): 2}:
                break
            assert time.monotonic() < deadline, _lag(body)
            time.sleep(0.2)
    finally:
        clients.close()

    assert r.status_code == 200
    assert "Not reachable" not in body and "did not answer" not in body
    # Its topic with the depths of both queues summed; not broker-a's.
    topic = _row(body, "node-topics", "topic", "orders-b")
    assert '<td class="num" data-testid="depth">5</td>' in topic
    assert "2/2" in topic and '<td class="mono">RW</td>' in topic
    assert 'data-topic="payments-a"' not in body
    # Its two clients as they called it; not broker-a's.
    producer = _row(body, "node-clients", "client", PRODUCER_ID)
    assert "PRODUCER" in producer and "orders-b" in producer
    assert "PYTHON 5.0.9" in producer and "online" in producer
    consumer = _row(body, "node-clients", "client", CONSUMER_ID)
    assert "SIMPLE_CONSUMER" in consumer and "GID_node_page" in consumer
    assert "JAVA 5.0.7" in consumer and "orders-b" in consumer
    assert "only-on-a" not in body
    # The endpoint's counters after the sends, receives and acks.
    assert _counter(body, "sent") == 5
    assert _counter(body, "received") == 3
    assert _counter(body, "acked") == 3
    # Batches only for calls that found the log or pop state busy: reported.
    assert _counter(body, "send_jobs") is not None
    assert _counter(body, "ack_jobs") is not None
    assert "Messages sent" in body and "Retries deduplicated" in body
    # Its status: role, heartbeat age, replication; its version, the rate
    # its store took messages at (5 in the last minute) and its disk.
    assert re.search(r'data-testid="heartbeat-age">\d+(\.\d+)?m?s<', body)
    assert f'data-testid="version">{broker_core.__version__}<' in body
    rate = re.search(r'data-testid="stored-rate">([\d.]+)<', body)
    assert rate and float(rate[1]) > 0, rate
    assert re.search(r'data-testid="disk-used">\d+%<', body)
    assert "no slave connected" in body
    # A master: its pending halves (none) and the way to decide them.
    assert '<div class="v" data-testid="pending-count">0</div>' in body
    assert 'href="/cluster/#pending-transactions"' in body
    assert 'data-testid="node-delays"' in body

    # broker-a's page: its own topic and client, none of broker-b's.
    body = viewer.get("/cluster/nodes/broker-a:0/").content.decode()
    assert 'data-topic="payments-a"' in body and 'data-client="only-on-a"' in body
    assert "orders-b" not in body and PRODUCER_ID not in body
    assert _counter(body, "sent") == 0


def test_a_slave_page_shows_what_a_slave_has(nodes, client_as):
    a = nodes.start("broker-a")
    s = nodes.start("broker-a", role="SLAVE", broker_id=1)
    for broker in (a, s):
        broker.create_topic("events", 1)
    s.send(Message("events", b"copy"))
    body = client_as("viewer").get("/cluster/nodes/broker-a:1/").content.decode()
    assert 'data-topic="events"' in body
    assert 'data-testid="slave-note"' in body
    # No halves or delays of its own: its master delivers and decides.
    assert 'data-testid="node-delays"' not in body
    assert "#pending-transactions" not in body
    assert "Not reachable" not in body


def test_a_node_page_lists_what_a_failover_cut(nodes, client_as):
    """The tails a store cut on rejoining as a slave (kept by
    ``ha.replica.keep_cut_tail``), read from its store through its admin
    API: how many records and client messages, and where their ids are."""
    from broker_core.ha.replica import keep_cut_tail

    a = nodes.start("broker-a")
    start = a.store.max_physical_offset()
    a.send_batch([Message("events", b"lost %d" % i, keys=f"k{i}") for i in range(3)])
    summary = keep_cut_tail(a.store, start, a.store.max_physical_offset())
    assert summary is not None and summary["messages"] == 3
    body = client_as("viewer").get("/cluster/nodes/broker-a:0/").content.decode()
    assert "Messages lost in a failover" in body
    assert 'data-testid="cut-tails"' in body
    assert f"{start:020d}-" in body  # the summary's file, named by the range


def test_a_silent_node_is_said_not_to_answer(nodes, client_as, settings):
    from console.cluster.node_detail import MASTER_READS, NODE_READS

    settings.CLUSTER_ADMIN_TIMEOUT_S = 1.0
    silent = nodes.silent("broker-s")
    r = client_as("viewer").get("/cluster/nodes/broker-s:0/")
    body = r.content.decode()
    assert r.status_code == 200
    assert (
        f"node broker-s:0 (http://127.0.0.1:{silent.port}) did not answer: "
        "no answer within 1 s" in body
    )
    # Every read was asked at once: one wait for the page, not one per read.
    assert silent.most_open == len(NODE_READS | MASTER_READS)
    assert 'data-testid="node-topics"' not in body


def test_a_read_that_fails_is_named_and_the_rest_kept(
    nodes, client_as, settings, monkeypatch
):
    from broker_core.cluster.node_ops import RemoteNodeOps
    from console.cluster import node_detail

    settings.CLUSTER_ADMIN_TIMEOUT_S = 1.0
    a = nodes.start("broker-a")
    a.create_topic("events", 1)
    silent = nodes.silent("broker-q")
    slow = f"http://127.0.0.1:{silent.port}"

    def slow_clients(ops):
        return RemoteNodeOps(slow, ops.token, ops.timeout).clients()

    monkeypatch.setitem(node_detail.NODE_READS, "clients", slow_clients)
    body = client_as("viewer").get("/cluster/nodes/broker-a:0/").content.decode()
    assert "clients: node broker-a:0 (http://" in body
    assert "Clients not known:" in body
    assert 'data-topic="events"' in body
    assert "node_status: node broker-a:0" not in body


def test_an_unknown_node_is_a_404_that_says_so(nodes, client_as):
    nodes.start("broker-a")
    viewer = client_as("viewer")
    r = viewer.get("/cluster/nodes/broker-z:0/")
    assert r.status_code == 404
    assert "node broker-z:0 is not a live node in cluster" in r.content.decode()
    r = viewer.get("/cluster/nodes/broker-a:7/")
    assert r.status_code == 404
    r = viewer.get("/cluster/nodes/broker-a/")
    assert r.status_code == 404
    assert "is not a node key" in r.content.decode()


def test_the_cluster_page_links_each_node_to_its_page(nodes, client_as):
    nodes.start("broker-a")
    nodes.start("broker-a", role="SLAVE", broker_id=1)
    nodes.start("broker-b")
    body = client_as("viewer").get("/cluster/").content.decode()
    links = re.findall(r'<a href="(/cluster/nodes/[^"]+/)" data-testid="node-link">',
                       body)  # fmt: skip
    assert links == [
        "/cluster/nodes/broker-a:0/",
        "/cluster/nodes/broker-a:1/",
        "/cluster/nodes/broker-b:0/",
    ]


def test_a_node_page_needs_a_signed_in_user(nodes, client):
    nodes.start("broker-a")
    r = client.get("/cluster/nodes/broker-a:0/")
    assert r.status_code in (302, 403)


def test_a_registry_that_does_not_answer_is_said_on_the_node_page(client_as, settings):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    settings.BROKER_CLUSTER = "c-down"
    settings.REGISTRY_URL = f"redis://127.0.0.1:{port}/0"
    r = client_as("viewer").get("/cluster/nodes/broker-a:0/")
    assert r.status_code == 200
    said = r.content.decode()
    assert "the route registry of cluster c-down did not answer" in said


def test_a_failed_status_keeps_the_rest_of_the_page(nodes, client_as):
    """The node's status read fails (its admin API answers 500 to
    ``node_status``, through a proxy in front of the real node) while the
    others answer: the page says the status is not known and still shows
    topics and lag."""
    import urllib.request
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    broker = nodes.start("broker-a")
    broker.send(Message("events", b"x"))
    (real,) = [n.admin for n in nodes.registry.nodes() if n.name == "broker-a"]

    class Proxy(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            if self.path == "/v1/ops/node_status":
                self.send_error(500, "status broken")
                return
            size = int(self.headers.get("Content-Length") or 0)
            request = urllib.request.Request(
                real + self.path,
                data=self.rfile.read(size),
                method="POST",
                headers={"Authorization": self.headers["Authorization"]},
            )
            with urllib.request.urlopen(request, timeout=5) as answer:
                body = answer.read()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args) -> None:
            pass

    proxy = ThreadingHTTPServer(("127.0.0.1", 0), Proxy)
    threading.Thread(target=proxy.serve_forever, daemon=True).start()
    try:
        nodes.register("broker-a", f"http://127.0.0.1:{proxy.server_port}")
        body = client_as("viewer").get("/cluster/nodes/broker-a:0/").content.decode()
    finally:
        proxy.shutdown()
        proxy.server_close()
    assert 'data-testid="status-missing"' in body
    assert "Metrics not known" in body
    # The node's HTTP 500 in a short phrase, the node and its address named:
    # it answered, so it failed the request (``node_error``), not "unavailable".
    assert (
        f"node_status: node broker-a:0 (http://127.0.0.1:{proxy.server_port}) "
        "failed the request: see its log" in body
    )
    assert "urlopen" not in body and "status broken" not in body
    assert _row(body, "node-topics", "topic", "events")  # the rest is shown
