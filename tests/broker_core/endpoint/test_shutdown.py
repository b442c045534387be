"""SIGTERM stops the endpoint gracefully, on both fronts: a long poll in
progress is answered (nothing new, MESSAGE_NOT_FOUND) instead of being cut
off with UNAVAILABLE, acknowledged sends survive, the process exits 0 and
its log has no Traceback."""

from __future__ import annotations

import signal
import threading
import time

import grpc
import pytest
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2_grpc as sgrpc

from broker_core import Broker
from tests.broker_core.endpoint.test_nonblocking import MD, _send, receive_request
from tests.endpoint_server import start_server
from tests.support import free_port

pytestmark = [pytest.mark.protocol, pytest.mark.slow]


@pytest.mark.parametrize("front", ["python", "native"])
def test_sigterm_answers_long_polls_and_exits_cleanly(tmp_path, front) -> None:
    if front == "native":
        pytest.importorskip("broker_core._native")
    port = free_port()
    log = tmp_path / "server.log"
    proc = start_server(tmp_path / "store", port, log, ("--front", front))
    answers: list[object] = []
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
            stub = sgrpc.MessagingServiceStub(ch)
            sent = _send(stub, "Stopping", b"kept")
            assert sent.status.code == pb.OK
            got = [
                r
                for r in stub.ReceiveMessage(
                    receive_request("Stopping", "GID_stop", poll_s=1), metadata=MD
                )
                if r.HasField("message")
            ]
            assert [m.message.body for m in got] == [b"kept"]

            def poll() -> None:
                try:
                    for r in stub.ReceiveMessage(
                        receive_request("Stopping", "GID_stop", poll_s=25),
                        metadata=MD,
                        timeout=40,
                    ):
                        if r.HasField("status"):
                            answers.append(r.status.code)
                except grpc.RpcError as exc:
                    answers.append(exc.code())

            pollers = [threading.Thread(target=poll) for _ in range(3)]
            for t in pollers:
                t.start()
            time.sleep(1.5)  # the three are waiting in their long polls
            t0 = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            for t in pollers:
                t.join(timeout=30)
            answered_s = time.monotonic() - t0
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    assert answers == [pb.MESSAGE_NOT_FOUND] * 3, answers
    assert answered_s < 10
    text = log.read_text()
    assert "Traceback" not in text, text[-3000:]
    with Broker.open(tmp_path / "store") as b:
        assert b.store.max_physical_offset() > 0  # the acknowledged send is there
