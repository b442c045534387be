"""Topic message types and namespaces at the endpoint's edge, with requests a
client that checks nothing itself would send (raw gRPC stubs): the server's
own refusal, not the official clients' (those are in tests/conformance)."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import grpc
import pytest
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb
from rocketmq.grpc_protocol import service_pb2_grpc as sgrpc

from broker_core import Broker
from tests.endpoint_server import PY, ROOT, stop_server, wait_port
from tests.support import free_port

pytestmark = [pytest.mark.protocol]

C = pb.Code


@pytest.fixture(scope="module")
def ep(tmp_path_factory):
    base = tmp_path_factory.mktemp("types")
    store = base / "store"
    with Broker.open(store) as b:
        b.create_topic("Plain")
        b.create_topic("Ordered", message_type="FIFO")
        b.create_topic("Later", message_type="DELAY")
        b.create_topic("Any", message_type="MIXED")
    port = free_port()
    proc = subprocess.Popen(
        [PY, "-m", "broker_core", "serve", "--store", str(store),
         "--listen", f"127.0.0.1:{port}", "--no-redis-relay"],
        cwd=ROOT, stdout=open(base / "log", "w"), stderr=subprocess.STDOUT,
    )  # fmt: skip
    wait_port(proc, port)
    ch = grpc.insecure_channel(f"127.0.0.1:{port}")
    yield {"stub": sgrpc.MessagingServiceStub(ch), "store": store}
    ch.close()
    assert stop_server(proc) == 0
    assert "Traceback" not in (base / "log").read_text()


MD = (("x-mq-client-id", "raw-test"),)


def send(
    stub,
    topic,
    ns="",
    group="",
    deliver=False,
    priority=None,
    body=b"x",
    tx=False,
    lite="",
):
    sp = pb.SystemProperties(message_id="", body_encoding=pb.IDENTITY)
    if tx:
        sp.message_type = pb.TRANSACTION
    if lite:
        sp.lite_topic = lite
    if group:
        sp.message_group = group
    if deliver:
        sp.delivery_timestamp.FromMilliseconds(int(time.time() * 1000) + 60_000)
    if priority is not None:
        sp.priority = priority
    m = pb.Message(
        topic=pb.Resource(resource_namespace=ns, name=topic),
        system_properties=sp,
        body=body,
    )
    r = stub.SendMessage(spb.SendMessageRequest(messages=[m]), metadata=MD, timeout=10)
    return r.entries[0].status.code if r.entries else r.status.code


def depth(store: Path, topic: str) -> int:
    with Broker.open(store) as b:
        b.store.refresh_topics()
        cfg = b.store.topics.topics.get(topic)
        if cfg is None:
            return -1
        return sum(b.store.max_offset(topic, q) for q in range(cfg.queue_nums))


def test_a_message_its_topic_was_not_made_for_is_refused_and_not_stored(ep):
    stub = ep["stub"]
    assert send(stub, "Plain", group="g1") == C.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE
    assert send(stub, "Plain", deliver=True) == C.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE
    assert send(stub, "Plain", priority=3) == C.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE
    assert send(stub, "Ordered") == C.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE
    assert depth(ep["store"], "Plain") == 0
    assert depth(ep["store"], "Ordered") == 0
    assert send(stub, "Ordered", group="g1") == C.OK
    assert send(stub, "Later", deliver=True) == C.OK
    assert send(stub, "Any", group="g1") == C.OK and send(stub, "Any") == C.OK
    assert send(stub, "Plain") == C.OK


def test_routes_advertise_the_topic_type(ep):
    r = ep["stub"].QueryRoute(
        spb.QueryRouteRequest(topic=pb.Resource(name="Ordered")),
        metadata=MD,
        timeout=10,
    )
    assert r.status.code == C.OK
    assert {tuple(q.accept_message_types) for q in r.message_queues} == {(pb.FIFO,)}


def test_namespaces_are_kept_apart_and_answered_with_bare_names(ep):
    stub = ep["stub"]
    assert send(stub, "Shared", ns="nsA", body=b"a") == C.OK
    assert send(stub, "Shared", ns="nsB", body=b"b") == C.OK
    assert depth(ep["store"], "nsA%Shared") == 1
    assert depth(ep["store"], "nsB%Shared") == 1
    assert depth(ep["store"], "Shared") == -1  # never made
    r = stub.QueryRoute(
        spb.QueryRouteRequest(
            topic=pb.Resource(resource_namespace="nsA", name="Shared")
        ),
        metadata=MD,
        timeout=10,
    )
    assert r.status.code == C.OK
    assert {(q.topic.resource_namespace, q.topic.name) for q in r.message_queues} == {
        ("nsA", "Shared")
    }
    assert send(stub, "Shared", ns="bad ns!") == C.BAD_REQUEST


def test_holes_found_by_review_stay_closed(ep):
    stub, store = ep["stub"], ep["store"]
    conflict = C.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE
    # The first message to a topic that does not exist yet: checked as NORMAL,
    # what it would make the topic.
    assert send(stub, "Fresh1", group="g1") == conflict
    assert send(stub, "Fresh2", tx=True) == conflict
    assert depth(store, "Fresh1") in (-1, 0) and depth(store, "Fresh2") in (-1, 0)
    # Priority and lite: on no topic, MIXED included.
    assert send(stub, "Any", priority=1) == conflict
    assert send(stub, "Any", lite="lt") == conflict
    # A half with a delivery time (its delay would be dropped on commit).
    assert send(stub, "Any", tx=True, deliver=True) == conflict
    # Names with a trailing newline.
    assert send(stub, "Plain\n") == C.ILLEGAL_TOPIC
    assert send(stub, "Plain", ns="nsA\n") == C.BAD_REQUEST


def test_a_request_mixing_a_namespace_and_none_is_refused(ep):
    r = ep["stub"].ReceiveMessage(
        spb.ReceiveMessageRequest(
            group=pb.Resource(resource_namespace="nsA", name="GR"),
            message_queue=pb.MessageQueue(topic=pb.Resource(name="Plain")),
            filter_expression=pb.FilterExpression(type=pb.TAG, expression="*"),
            batch_size=1,
        ),
        metadata=MD,
        timeout=10,
    )
    codes = [x.status.code for x in r if x.HasField("status")]
    assert codes == [C.BAD_REQUEST]
