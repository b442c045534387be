"""Long polls are woken at once by appends from other processes.

The endpoint watches the store's dispatched position only while a long poll
waits; with nobody waiting it sleeps until one joins. A message appended by
another process (a Celery timer worker, a second endpoint) while a consumer
long-polls must reach it at once, not at the next re-poll a second later, on
the first poll after an idle spell and on every one after it.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import grpc
import pytest
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2_grpc as sgrpc

from broker_core.endpoint.config import REPOLL_S
from tests.broker_core.endpoint.test_nonblocking import MD, _send, receive_request
from tests.conftest import ROOT
from tests.endpoint_server import start_server, stop_server
from tests.support import free_port

pytestmark = [pytest.mark.protocol, pytest.mark.slow]

APPENDER = """
import sys
from broker_core import Broker, Message
with Broker.open(sys.argv[1]) as b:
    for line in sys.stdin:
        b.send(Message(sys.argv[2], line.strip().encode()))
        print("sent", flush=True)
"""


def test_appends_by_another_process_wake_a_long_poll(tmp_path: Path) -> None:
    port = free_port()
    store = tmp_path / "store"
    server = start_server(store, port, tmp_path / "server.log", workers=1)
    appender = None
    try:
        stub = sgrpc.MessagingServiceStub(grpc.insecure_channel(f"127.0.0.1:{port}"))
        topic, group = "Wakeups", "GID_wakeups"
        assert _send(stub, topic, b"first").status.code == pb.OK
        req = receive_request(topic, group, poll_s=10)
        first = [
            r.message.body
            for r in stub.ReceiveMessage(req, metadata=MD, timeout=15)
            if r.HasField("message")
        ]
        assert first == [b"first"]
        appender = subprocess.Popen(
            [sys.executable, "-c", APPENDER, str(store), topic],
            cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert appender.stdin is not None and appender.stdout is not None
        time.sleep(1.0)  # nobody waits: the watcher sleeps

        woken_after = []
        for i in range(3):
            got: dict[str, object] = {}

            def receive(got: dict[str, object] = got) -> None:
                got["messages"] = [
                    r.message.body
                    for r in stub.ReceiveMessage(req, metadata=MD, timeout=15)
                    if r.HasField("message")
                ]
                got["at"] = time.monotonic()

            waiter = threading.Thread(target=receive)
            waiter.start()
            time.sleep(0.5)  # the long poll waits in the endpoint now
            appender.stdin.write(f"from-another-process-{i}\n")
            appender.stdin.flush()
            assert appender.stdout.readline().strip() == "sent"
            sent_at = time.monotonic()
            waiter.join(timeout=15)
            assert got["messages"] == [f"from-another-process-{i}".encode()]
            woken_after.append(got["at"] - sent_at)  # type: ignore[operator]
            time.sleep(0.5)  # idle again before the next round
    finally:
        if appender is not None:
            appender.kill()
        stop_server(server)
    # Woken by the watcher (every few ms), not found by the re-poll a second on.
    assert max(woken_after) < REPOLL_S / 2, woken_after
