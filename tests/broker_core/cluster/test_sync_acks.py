"""SYNC means SYNC, over real ``serve`` processes and raw gRPC stubs: a
SYNC_MASTER acknowledges a send, a recognised retry of one and a transaction's
commit only once a slave has the log; without a slave (none connected, none
possible without ``--ha-listen``, or one stopped with SIGSTOP) every one of
them answers SLAVE_PERSISTENCE_TIMEOUT, never OK on one copy."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import uuid
from pathlib import Path

import grpc
import pytest
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb
from rocketmq.grpc_protocol import service_pb2_grpc as sgrpc

from broker_core.shared import read_commit_pos
from tests.broker_core.ha._hahelpers import (
    ROOT,
    free_port,
    redis_up,
    secret_file,
    wait_for,
)

pytestmark = [pytest.mark.slow, pytest.mark.protocol]

C = pb.Code
MD = (("x-mq-client-id", "sync-acks-test"),)
REGISTRY = "redis://127.0.0.1:6379/13"


if not redis_up():
    pytestmark.append(pytest.mark.skip(reason="no Redis on 127.0.0.1:6379"))


class Node:
    def __init__(self, tmp: Path, name: str, *extra: str) -> None:
        self.store = tmp / name
        self.port = free_port()
        self.log = tmp / f"{name}.log"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "broker_core", "serve", "--store",
             str(self.store), "--listen", f"127.0.0.1:{self.port}",
             "--no-redis-relay", "--registry", REGISTRY,
             "--ha-secret-file", str(secret_file(tmp)), "--sync-timeout", "1",
             *extra],
            cwd=ROOT, stdout=open(self.log, "w"), stderr=subprocess.STDOUT,  # noqa: SIM115
        )  # fmt: skip
        wait_for(self._up, 60, f"{name} to listen")
        self.channel = grpc.insecure_channel(f"127.0.0.1:{self.port}")
        self.stub = sgrpc.MessagingServiceStub(self.channel)

    def _up(self) -> bool:
        assert self.proc.poll() is None, self.log.read_text()
        try:
            socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
            return True
        except OSError:
            return False

    def stop(self) -> None:
        self.channel.close()
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGCONT)
            self.proc.terminate()
            self.proc.wait(30)
        text = self.log.read_text()
        assert "Traceback" not in text
        # The broker's own lines are JSON, as every process of the system logs.
        ours = [line for line in text.splitlines() if "broker_core" in line]
        assert any("gRPC endpoint listening on" in line for line in ours), text
        assert all(
            json.loads(line)["logger"].startswith("broker_core") for line in ours
        )


def message(topic: str, msg_id: str, **props: object) -> pb.Message:
    return pb.Message(
        topic=pb.Resource(name=topic),
        system_properties=pb.SystemProperties(
            message_id=msg_id, body_encoding=pb.IDENTITY, **props
        ),
        body=b"payload-" + msg_id.encode(),
    )


def send(node: Node, *msgs: pb.Message) -> list[int]:
    r = node.stub.SendMessage(
        spb.SendMessageRequest(messages=list(msgs)), metadata=MD, timeout=30
    )
    return [e.status.code for e in r.entries] or [r.status.code]


def cluster_args(cluster: str, name: str = "broker-a") -> list[str]:
    return ["--cluster", cluster, "--node", name]


def test_sync_master_acks_only_what_a_slave_has(tmp_path: Path) -> None:
    cluster = f"sync-{uuid.uuid4().hex[:8]}"
    ha = f"127.0.0.1:{free_port()}"
    subprocess.run(
        [sys.executable, "-m", "broker_core", "topic", "create",
         str(tmp_path / "master"), "Payments", "--type", "TRANSACTION"],
        cwd=ROOT, check=True, capture_output=True,
    )  # fmt: skip
    master = Node(tmp_path, "master", *cluster_args(cluster), "--role",
                  "SYNC_MASTER", "--ha-listen", ha)  # fmt: skip
    slave = None
    try:
        # No slave yet: a send, its retry (same message id) and a batch fail.
        first = uuid.uuid4().hex
        assert send(master, message("Orders", first)) == [C.SLAVE_PERSISTENCE_TIMEOUT]
        assert send(master, message("Orders", first)) == [C.SLAVE_PERSISTENCE_TIMEOUT]
        batch = [message("Orders", uuid.uuid4().hex) for _ in range(3)]
        assert send(master, *batch) == [C.SLAVE_PERSISTENCE_TIMEOUT] * 3

        slave = Node(tmp_path, "slave", *cluster_args(cluster), "--broker-id", "1",
                     "--master-ha", ha)  # fmt: skip
        # The retry is recognised (stored once) and acknowledged once the
        # slave has it.
        wait_for(
            lambda: send(master, message("Orders", first)) == [C.OK], 60,
            "the retry to be acknowledged with a slave following",
        )  # fmt: skip
        end = read_commit_pos(master.store)
        wait_for(lambda: read_commit_pos(slave.store) >= end, 30, "the slave")

        # A transaction's half goes in; the slave stops; the commit is not
        # acknowledged, nor is a retry of the earlier send.
        half_id = uuid.uuid4().hex
        half = message("Payments", half_id, message_type=pb.TRANSACTION)
        r = master.stub.SendMessage(
            spb.SendMessageRequest(messages=[half]), metadata=MD, timeout=30
        )
        assert r.entries[0].status.code == C.OK, r
        tid = r.entries[0].transaction_id
        os.kill(slave.proc.pid, signal.SIGSTOP)
        try:
            e = master.stub.EndTransaction(
                spb.EndTransactionRequest(
                    topic=pb.Resource(name="Payments"), message_id=half_id,
                    transaction_id=tid, resolution=pb.COMMIT,
                    source=pb.SOURCE_CLIENT,
                ),
                metadata=MD, timeout=30,
            )  # fmt: skip
            assert e.status.code == C.SLAVE_PERSISTENCE_TIMEOUT, e
            assert send(master, message("Orders", first)) == [
                C.SLAVE_PERSISTENCE_TIMEOUT
            ]
        finally:
            os.kill(slave.proc.pid, signal.SIGCONT)
        wait_for(
            lambda: send(master, message("Orders", first)) == [C.OK], 60,
            "acknowledgements once the slave runs again",
        )  # fmt: skip
    finally:
        if slave is not None:
            slave.stop()
        master.stop()
    # The retried message is stored once on the master.
    text = b"payload-" + first.encode()
    end = read_commit_pos(master.store)
    first_segment = sorted((master.store / "commitlog").iterdir())[0]
    with open(first_segment, "rb") as f:
        assert f.read(end).count(text) == 1


def test_sync_master_without_ha_listen_acks_nothing(tmp_path: Path) -> None:
    cluster = f"sync-{uuid.uuid4().hex[:8]}"
    node = Node(tmp_path, "lone", *cluster_args(cluster), "--role", "SYNC_MASTER")
    try:
        assert send(node, message("Orders", uuid.uuid4().hex)) == [
            C.SLAVE_PERSISTENCE_TIMEOUT
        ]
    finally:
        node.stop()
