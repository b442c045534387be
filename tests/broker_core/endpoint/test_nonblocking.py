"""The endpoint never blocks its event loop on the store.

Another process holds the store's append lock for seconds (a long batch, a slow
disk). A send through the endpoint must wait for it, but meanwhile a Heartbeat
and a Receive of a message already stored answer at once: they were stalled
behind the blocked send while the handlers called the store on the loop.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import grpc
import pytest
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb
from rocketmq.grpc_protocol import service_pb2_grpc as sgrpc

from tests.endpoint_server import start_server, stop_server
from tests.support import free_port

pytestmark = [pytest.mark.protocol, pytest.mark.slow]

HOLD_S = 4.0
MD = (("x-mq-client-id", "nonblocking-test"),)

HOLDER = """
import sys, time
from broker_core import Broker
with Broker.open(sys.argv[1]) as b:
    with b.store.exclusive_appends():
        print("locked", flush=True)
        time.sleep(float(sys.argv[2]))
    print("released", flush=True)
"""


def _send(stub, topic: str, body: bytes) -> spb.SendMessageResponse:
    msg = pb.Message(topic=pb.Resource(name=topic), body=body)
    msg.system_properties.message_type = pb.NORMAL
    return stub.SendMessage(spb.SendMessageRequest(messages=[msg]), metadata=MD)


def receive_request(
    topic: str, group: str, batch: int = 8, invisible_s: int = 30, poll_s: int = 2
) -> spb.ReceiveMessageRequest:
    """A ReceiveMessage request as the official clients build one."""
    req = spb.ReceiveMessageRequest(
        group=pb.Resource(name=group),
        message_queue=pb.MessageQueue(topic=pb.Resource(name=topic)),
        filter_expression=pb.FilterExpression(type=pb.TAG, expression="*"),
        batch_size=batch,
    )
    req.invisible_duration.FromSeconds(invisible_s)
    req.long_polling_timeout.FromSeconds(poll_s)
    return req


def _receive(stub, topic: str) -> list[pb.Message]:
    req = receive_request(topic, "GID_nonblocking")
    return [
        r.message
        for r in stub.ReceiveMessage(req, metadata=MD, timeout=10)
        if r.HasField("message")
    ]


def test_a_held_append_lock_stalls_only_sends(tmp_path) -> None:
    from tests.conftest import ROOT

    port = free_port()
    store = tmp_path / "store"
    server = start_server(store, port, tmp_path / "server.log")
    holder = None
    try:
        channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        stub = sgrpc.MessagingServiceStub(channel)
        topic = "NonBlocking"
        stub.QueryRoute(
            spb.QueryRouteRequest(topic=pb.Resource(name=topic)), metadata=MD
        )
        assert _send(stub, topic, b"before").status.code == pb.OK

        holder = subprocess.Popen(
            [sys.executable, "-c", HOLDER, str(store), str(HOLD_S)],
            cwd=ROOT, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "locked"
        locked_at = time.monotonic()

        blocked: dict[str, object] = {}

        def send_while_locked() -> None:
            t0 = time.monotonic()
            blocked["response"] = _send(stub, topic, b"during")
            blocked["waited"] = time.monotonic() - t0

        sender = threading.Thread(target=send_while_locked)
        sender.start()
        time.sleep(0.3)  # the send is now waiting for the lock in the endpoint

        t0 = time.monotonic()
        stub.Heartbeat(
            spb.HeartbeatRequest(client_type=pb.SIMPLE_CONSUMER), metadata=MD
        )
        heartbeat_s = time.monotonic() - t0
        t0 = time.monotonic()
        got = _receive(stub, topic)
        receive_s = time.monotonic() - t0
        still_locked = time.monotonic() - locked_at < HOLD_S and holder.poll() is None

        sender.join(timeout=HOLD_S + 10)
        assert holder.stdout.readline().strip() == "released"
    finally:
        if holder is not None and holder.poll() is None:
            holder.kill()
        stop_server(server)
    assert still_locked, "the checks ran after the lock was released: inconclusive"
    assert heartbeat_s < 0.5, heartbeat_s
    assert receive_s < 1.0, receive_s
    assert [m.body for m in got] == [b"before"]
    # The send itself waited for the lock, then succeeded.
    response = blocked["response"]
    assert response.status.code == pb.OK, response  # type: ignore[attr-defined]
    assert blocked["waited"] > 2.0, blocked["waited"]  # type: ignore[operator]


def test_routes_advertise_the_topics_real_queues(tmp_path) -> None:
    """Producers spread over every queue of a topic, with RocketMQ's
    permissions: read-write below both counts, then read-only or write-only."""
    from broker_core import Broker

    port = free_port()
    store = tmp_path / "store"
    server = start_server(store, port, tmp_path / "server.log")
    try:
        with Broker.open(store) as b:  # another process, as an admin would
            b.create_topic("Routed", read_queue_nums=4, write_queue_nums=2)
        stub = sgrpc.MessagingServiceStub(grpc.insecure_channel(f"127.0.0.1:{port}"))
        r = stub.QueryRoute(
            spb.QueryRouteRequest(topic=pb.Resource(name="Routed")), metadata=MD
        )
        auto = stub.QueryRoute(
            spb.QueryRouteRequest(topic=pb.Resource(name="AutoCreated")), metadata=MD
        )
    finally:
        stop_server(server)
    assert r.status.code == pb.OK
    assert [(q.id, q.permission) for q in r.message_queues] == [
        (0, pb.READ_WRITE),
        (1, pb.READ_WRITE),
        (2, pb.READ),
        (3, pb.READ),
    ]
    assert auto.status.code == pb.OK and len(auto.message_queues) >= 1
