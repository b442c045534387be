"""Cluster nodes as real ``serve`` processes, driven with raw gRPC stubs
(the SYNC-ack and controller tests)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import grpc
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb
from rocketmq.grpc_protocol import service_pb2_grpc as sgrpc

from tests.broker_core.ha._hahelpers import ROOT, free_port, secret_file, wait_for
from tests.support import redis_db

C = pb.Code
MD = (("x-mq-client-id", "sync-acks-test"),)
REGISTRY = redis_db(13)


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


def receive(
    node: Node, topic: str, group: str, wait_s: int = 2, invisible_s: int = 30
) -> list[pb.Message]:
    """One ReceiveMessage long poll of ``group`` on ``topic``: the messages."""
    req = spb.ReceiveMessageRequest(
        group=pb.Resource(name=group),
        message_queue=pb.MessageQueue(topic=pb.Resource(name=topic), id=0),
        filter_expression=pb.FilterExpression(type=pb.TAG, expression="*"),
        batch_size=32, auto_renew=False,
    )  # fmt: skip
    req.invisible_duration.seconds = invisible_s
    req.long_polling_timeout.seconds = wait_s
    out = node.stub.ReceiveMessage(req, metadata=MD, timeout=wait_s + 20)
    return [r.message for r in out if r.WhichOneof("content") == "message"]


def stored(store: Path) -> bytes:
    """A node's commit log up to its commit position (read, never opened:
    the node may be running); empty before its first append."""
    from broker_core.shared import read_commit_pos

    end = read_commit_pos(store)
    log = store / "commitlog"
    out = bytearray()
    for seg in sorted(log.iterdir()) if log.is_dir() else []:
        if len(out) >= end:
            break
        with open(seg, "rb") as f:
            out += f.read(end - len(out))
    return bytes(out)
