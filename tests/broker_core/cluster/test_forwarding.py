"""A node that takes no writes answers its clients with its master's answer
(``broker_core/endpoint/forward.py``), over real ``serve`` processes and raw
gRPC stubs: a slave stores a send, ends a transaction and hands out messages
through its live master; a forwarded call is never forwarded twice; a master
that does not answer is a retryable error, not a send stored on a slave."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb

from tests.broker_core.cluster._nodes import (
    MD,
    C,
    Node,
    cluster_args,
    message,
    receive,
    send,
    stored,
)
from tests.broker_core.ha._hahelpers import ROOT, free_port, redis_up, wait_for
from tests.broker_core.rawclient import RawClient

pytestmark = [pytest.mark.slow, pytest.mark.protocol]

if not redis_up():
    pytestmark.append(pytest.mark.skip(reason="no Redis on 127.0.0.1:6379"))


@pytest.fixture
def pair(tmp_path: Path):
    cluster = f"fwd-{uuid.uuid4().hex[:8]}"
    ha = f"127.0.0.1:{free_port()}"
    for store in ("master", "slave"):
        subprocess.run(
            [sys.executable, "-m", "broker_core", "topic", "create",
             str(tmp_path / store), "Payments", "--type", "TRANSACTION"],
            cwd=ROOT, check=True, capture_output=True,
        )  # fmt: skip
    master = Node(tmp_path, "master", *cluster_args(cluster), "--ha-listen", ha,
                  "--no-topic-type-check", "--embedded-timers",
                  "--transaction-timeout-ms", "1000",
                  "--check-interval-ms", "1000")  # fmt: skip
    slave = Node(tmp_path, "slave", *cluster_args(cluster), "--broker-id", "1",
                 "--master-ha", ha)  # fmt: skip
    try:
        yield master, slave
    finally:
        slave.stop()
        master.stop()


def test_a_slave_answers_writes_and_receives_with_its_masters_answer(pair) -> None:
    master, slave = pair
    first = uuid.uuid4().hex
    # Stored by the master (once, a retry through the slave included), never
    # by the slave itself: it has it only by replication.
    assert send(slave, message("Orders", first)) == [C.OK]
    assert send(slave, message("Orders", first)) == [C.OK]
    text = b"payload-" + first.encode()
    assert stored(master.store).count(text) == 1
    wait_for(
        lambda: stored(slave.store).count(text) == 1, 30, "the slave to replicate it"
    )

    # A transaction: its half and its commit, each through the slave.
    half_id = uuid.uuid4().hex
    r = slave.stub.SendMessage(
        spb.SendMessageRequest(
            messages=[message("Payments", half_id, message_type=pb.TRANSACTION)]
        ),
        metadata=MD, timeout=30,
    )  # fmt: skip
    assert r.entries[0].status.code == C.OK, r
    e = slave.stub.EndTransaction(
        spb.EndTransactionRequest(
            topic=pb.Resource(name="Payments"), message_id=half_id,
            transaction_id=r.entries[0].transaction_id, resolution=pb.COMMIT,
            source=pb.SOURCE_CLIENT,
        ),
        metadata=MD, timeout=30,
    )  # fmt: skip
    assert e.status.code == C.OK, e

    # Receive and acknowledge through the slave: the master's pop state.
    got = receive(slave, "Orders", "g-fwd")
    assert [m.system_properties.message_id for m in got] == [first]
    ack = slave.stub.AckMessage(
        spb.AckMessageRequest(
            group=pb.Resource(name="g-fwd"), topic=pb.Resource(name="Orders"),
            entries=[spb.AckMessageEntry(
                message_id=first,
                receipt_handle=got[0].system_properties.receipt_handle,
            )],
        ),
        metadata=MD, timeout=30,
    )  # fmt: skip
    assert ack.status.code == C.OK, ack
    # Acknowledged on the master: nothing more to receive there.
    assert receive(master, "Orders", "g-fwd") == []
    got = receive(master, "Payments", "g-fwd")
    assert [m.body for m in got] == [b"payload-" + half_id.encode()]


def test_a_forwarded_call_is_not_forwarded_again(pair) -> None:
    _, slave = pair
    msg = message("Orders", uuid.uuid4().hex)
    r = slave.stub.SendMessage(
        spb.SendMessageRequest(messages=[msg]),
        metadata=(*MD, ("x-mq-forwarded-by", "broker-z/0@10.9.9.9:1")),
        timeout=30,
    )  # fmt: skip
    assert r.status.code == C.FORBIDDEN, r
    # Nor is a receive served from the slave's replica for a client that
    # sets the header itself (its acks were kept on the slave, and the group
    # got every message again from the master).
    req = spb.ReceiveMessageRequest(
        group=pb.Resource(name="g-spoof"),
        message_queue=pb.MessageQueue(topic=pb.Resource(name="Orders"), id=0),
        filter_expression=pb.FilterExpression(type=pb.TAG, expression="*"),
        batch_size=32,
    )  # fmt: skip
    req.invisible_duration.seconds = 30
    req.long_polling_timeout.seconds = 1
    spoofed = (*MD, ("x-mq-forwarded-by", "broker-a/0@127.0.0.1:1"))
    out = list(slave.stub.ReceiveMessage(req, metadata=spoofed, timeout=20))
    assert [o.status.code for o in out if o.WhichOneof("content") == "status"] == [
        C.FORBIDDEN
    ], out
    assert not [o for o in out if o.WhichOneof("content") == "message"]


def test_a_master_that_does_not_answer_is_a_retryable_error(pair) -> None:
    master, slave = pair
    os.kill(master.proc.pid, signal.SIGSTOP)
    try:
        t0 = time.monotonic()
        r = slave.stub.SendMessage(
            spb.SendMessageRequest(messages=[message("Orders", uuid.uuid4().hex)]),
            metadata=MD, timeout=3,
        )  # fmt: skip
        assert r.status.code == C.PROXY_TIMEOUT, r
        assert time.monotonic() - t0 < 10
    finally:
        os.kill(master.proc.pid, signal.SIGCONT)
    master.proc.kill()
    master.proc.wait()
    body = uuid.uuid4().hex
    r = slave.stub.SendMessage(
        spb.SendMessageRequest(messages=[message("Orders", body)]),
        metadata=MD, timeout=10,
    )  # fmt: skip
    # The dead master is still registered (until its key expires): the
    # client hears the master did not answer, and tries again elsewhere; the
    # slave stores nothing of its own.
    assert r.status.code == C.HA_NOT_AVAILABLE, r
    assert stored(slave.store).count(body.encode()) == 0


def test_a_producer_connected_to_the_slave_alone_is_checked_by_the_master(
    pair,
) -> None:
    """A producer whose only Telemetry stream is to the slave: its half goes
    to the master through the slave; the master's check-back reaches it
    through the broker name's relay on the registry's Redis; its answer
    (EndTransaction, source CHECK) goes back through the slave and commits."""
    master, slave = pair
    producer = RawClient(f"127.0.0.1:{slave.port}", "py-producer-on-slave")
    try:
        producer.open_telemetry(["Payments"])
        producer.heartbeat()
        tid = producer.send_half("Payments", b"checked-through-the-slave")
        assert producer.checks.get(timeout=30) == tid
        e = producer.stub.EndTransaction(
            spb.EndTransactionRequest(
                topic=pb.Resource(name="Payments"), transaction_id=tid,
                resolution=pb.COMMIT, source=pb.SOURCE_SERVER_CHECK,
            ),
            metadata=producer.md, timeout=30,
        )  # fmt: skip
        assert e.status.code == C.OK, e
    finally:
        producer.close()
    got = receive(master, "Payments", "g-check")
    assert [m.body for m in got] == [b"checked-through-the-slave"]


def test_a_slave_routes_its_masters_topics_and_makes_none(pair) -> None:
    """QueryRoute on a slave: a topic its master has gets the cluster's route;
    a topic nobody has is TOPIC_NOT_FOUND, and the slave writes no topic of
    its own (it wrote the topic into its config/topics.json and said the
    registry was unreachable)."""
    master, slave = pair
    assert send(master, message("Orders", uuid.uuid4().hex)) == [C.OK]

    def route(topic: str) -> spb.QueryRouteResponse:
        return slave.stub.QueryRoute(
            spb.QueryRouteRequest(topic=pb.Resource(name=topic)),
            metadata=MD, timeout=30,
        )  # fmt: skip

    wait_for(lambda: route("Orders").message_queues, 30, "the master's route")
    r = route("Orders")
    assert r.status.code == C.OK and {q.broker.name for q in r.message_queues}, r
    r = route("MadeNowhere")
    assert r.status.code == C.TOPIC_NOT_FOUND and not r.message_queues, r
    assert "slave" in r.status.message
    topics = (slave.store / "config" / "topics.json").read_text()
    assert "MadeNowhere" not in topics
