"""SYNC means SYNC, over real ``serve`` processes and raw gRPC stubs: a
SYNC_MASTER acknowledges a send, a recognised retry of one and a transaction's
commit only once a slave has the log; without a slave (none connected, none
possible without ``--ha-listen``, or one stopped with SIGSTOP) every one of
them answers SLAVE_PERSISTENCE_TIMEOUT, never OK on one copy."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb

from broker_core.shared import read_commit_pos
from tests.broker_core.cluster._nodes import MD, C, Node, cluster_args, message, send
from tests.broker_core.ha._hahelpers import ROOT, free_port, redis_up, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.protocol]

if not redis_up():
    pytestmark.append(pytest.mark.skip(reason="no Redis on 127.0.0.1:6379"))


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
