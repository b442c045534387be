"""SIGKILL of the endpoint under load, on each front: every send it answered
OK is readable from the store afterwards (a front acknowledges only what the
store acknowledged; the native front batches calls on their way to Python
and back, so an answer that ran ahead of its append would show here)."""

from __future__ import annotations

import signal
import threading
import time
import uuid

import grpc
import pytest
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb
from rocketmq.grpc_protocol import service_pb2_grpc as sgrpc

from broker_core import Broker
from tests.endpoint_server import start_server
from tests.support import free_port

pytestmark = [pytest.mark.protocol, pytest.mark.slow, pytest.mark.crash]

TOPIC = "KillLoad"
SENDERS = 8


@pytest.mark.parametrize("front", ["python", "native"])
def test_every_acknowledged_send_survives_a_sigkill_under_load(tmp_path, front):
    store = tmp_path / "store"
    port = free_port()
    proc = start_server(store, port, tmp_path / "serve.log", extra=("--front", front))
    acked: list[tuple[str, bytes]] = []
    lock = threading.Lock()
    stop = threading.Event()

    def sender(n: int) -> None:
        channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        stub = sgrpc.MessagingServiceStub(channel)
        md = (("x-mq-client-id", f"kill-load-{n}"),)
        try:
            while not stop.is_set():
                # A few messages a call, as the clients' batches.
                msgs = []
                for _ in range(4):
                    body = f"{n}-{uuid.uuid4().hex}".encode()
                    m = pb.Message(topic=pb.Resource(name=TOPIC), body=body)
                    m.system_properties.message_id = uuid.uuid4().hex
                    m.system_properties.body_encoding = pb.IDENTITY
                    msgs.append(m)
                try:
                    r = stub.SendMessage(
                        spb.SendMessageRequest(messages=msgs), metadata=md, timeout=5
                    )
                except grpc.RpcError:
                    return  # the endpoint is gone
                with lock:
                    for m, e in zip(msgs, r.entries, strict=True):
                        if e.status.code == pb.OK:
                            acked.append((e.message_id, m.body))
        finally:
            channel.close()

    threads = [threading.Thread(target=sender, args=(i,)) for i in range(SENDERS)]
    for t in threads:
        t.start()
    try:
        deadline = time.monotonic() + 30
        while len(acked) < 2000 and time.monotonic() < deadline:
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    finally:
        stop.set()
        if proc.poll() is None:
            proc.kill()
        for t in threads:
            t.join(30)
    assert len(acked) >= 500, len(acked)
    with Broker.open(store) as b:
        missing = []
        for msg_id, body in acked:
            m = b.get_message(msg_id, TOPIC)
            if m is None or m.body != body:
                missing.append(msg_id)
        assert not missing, (len(missing), len(acked), missing[:5])
