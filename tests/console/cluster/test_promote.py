"""Promoting a slave from the Cluster page, over real node processes on
127.0.0.1 (``serve --cluster``: a master with its replication listener, its
slave following it, a route registry in the local Redis): refused while the
master heartbeats, done once it is gone, audited, admins only; the promoted
node takes writes and keeps what it replicated."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import grpc
import pytest
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb
from rocketmq.grpc_protocol import service_pb2_grpc as sgrpc

from broker_core import Broker
from broker_core.browse import SEARCH_SCAN_BUDGET, message_json
from broker_core.cluster import RouteRegistry
from broker_core.cluster.node_ops import NodeUnavailableError, RemoteNodeOps
from broker_core.search import MessageQuery
from console.audit.models import AuditRecord
from tests.console.cluster.conftest import REGISTRY_URL, TOKEN
from tests.support import free_port

pytestmark = [pytest.mark.services, pytest.mark.slow, pytest.mark.django_db]

ROOT = Path(__file__).resolve().parents[3]
EXPIRY_S = 3.0


def _wait(cond, timeout: float, what: str):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while True:
        got = cond()
        if got:
            return got
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


class _Node:
    def __init__(
        self, tmp: Path, cluster: str, key: str, *extra: str, store: str = ""
    ) -> None:
        self.grpc, self.admin = free_port(), free_port()
        self.store = tmp / (store or key.replace(":", "-"))
        self.log = tmp / f"{key}-{self.grpc}.log"
        name, _, bid = key.partition(":")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "broker_core", "serve", "--store", str(self.store),
             "--listen", f"127.0.0.1:{self.grpc}", "--cluster", cluster,
             "--node", name, "--broker-id", bid, "--registry", REGISTRY_URL,
             "--registry-expiry", str(EXPIRY_S), "--no-redis-relay",
             "--admin-listen", f"127.0.0.1:{self.admin}",
             "--admin-token-file", str(tmp / "admin.token"), *extra],
            cwd=ROOT, stdout=open(self.log, "w"),  # noqa: SIM115
            stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip

    @property
    def ops(self) -> RemoteNodeOps:
        """The node's operations through its admin API."""
        return RemoteNodeOps(f"http://127.0.0.1:{self.admin}", TOKEN, 10.0)

    def status(self) -> dict:
        return self.ops.node_status()

    def messages(self, topic: str) -> list[dict]:
        """The newest 50 messages of ``topic`` (the Cluster page's search)."""
        page = self.ops.search_messages(
            MessageQuery(topic=topic), 50, None, SEARCH_SCAN_BUDGET
        )
        return [message_json(m, 0) for m in page.messages]

    def send(self, topic: str, body: bytes) -> spb.SendMessageResponse:
        stub = sgrpc.MessagingServiceStub(
            grpc.insecure_channel(f"127.0.0.1:{self.grpc}")
        )
        msg = pb.Message(topic=pb.Resource(name=topic), body=body)
        msg.system_properties.message_type = pb.NORMAL
        return stub.SendMessage(
            spb.SendMessageRequest(messages=[msg]),
            metadata=(("x-mq-client-id", "promote-test"),),
            timeout=10,
        )

    #: nodes a test starts besides the pair (killed with it)
    extra: list[_Node] = []

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)


@pytest.fixture
def pair(tmp_path, settings):  # type: ignore[no-untyped-def]
    cluster = f"promote-{uuid.uuid4().hex[:10]}"
    (tmp_path / "admin.token").write_text(TOKEN + "\n")
    (tmp_path / "ha.secret").write_text("promote-test-secret\n")
    settings.BROKER_CLUSTER = cluster
    settings.REGISTRY_URL = REGISTRY_URL
    settings.CLUSTER_ADMIN_TOKEN_FILE = str(tmp_path / "admin.token")
    with Broker.open(str(tmp_path / "broker-a-0")) as b:
        b.create_topic("orders", 2, 2)
    ha = free_port()
    secret = ("--ha-secret-file", str(tmp_path / "ha.secret"))
    master = _Node(tmp_path, cluster, "broker-a:0", "--ha-listen", f"127.0.0.1:{ha}",
                   *secret)  # fmt: skip
    slave = _Node(tmp_path, cluster, "broker-a:1", "--master-ha", f"127.0.0.1:{ha}",
                  "--ha-listen", f"127.0.0.1:{free_port()}", *secret)  # fmt: skip
    registry = RouteRegistry(REGISTRY_URL, cluster, EXPIRY_S)
    try:
        _wait(lambda: {n.key for n in registry.nodes()} == {"broker-a:0", "broker-a:1"},
              60, "both nodes registered")  # fmt: skip
        yield master, slave, registry
    finally:
        for node in (slave, master, *_Node.extra):
            node.kill()
        _Node.extra.clear()
        keys = list(registry.redis.scan_iter(f"{registry.prefix}:*"))
        if keys:
            registry.redis.delete(*keys)


def _promote(client, key: str, **form: str):  # type: ignore[no-untyped-def]
    data = {"role": "ASYNC_MASTER", "reason": "broker-a's host died",
            "confirm": "PROMOTE", **form}  # fmt: skip
    r = client.post(f"/cluster/nodes/{key}/promote/", data, follow=True)
    assert r.status_code == 200
    return r.content.decode()


def test_an_admin_promotes_the_slave_once_its_master_is_gone(pair, client_as):
    master, slave, registry = pair
    sent = [master.send("orders", f"m{i}".encode()) for i in range(5)]
    assert all(r.status.code == pb.OK for r in sent)
    end = master.status()["log_end"]
    _wait(lambda: slave.status()["log_end"] >= end, 30, "the slave caught up")
    admin = client_as("admin")

    # The page offers promotion on the slave's row only.
    page = admin.get("/cluster/").content.decode()
    assert page.count('data-testid="promote-form"') == 1
    assert "/cluster/nodes/broker-a:1/promote/" in page
    # An operator may not; nor without the typed confirmation.
    body = _promote(client_as("operator"), "broker-a:1")
    assert "needs the admin role" in body
    assert "Type PROMOTE" in _promote(admin, "broker-a:1", confirm="yes")
    # While the master heartbeats, the node refuses (two masters of one name).
    body = _promote(admin, "broker-a:1")
    assert "was not promoted" in body and "is alive" in body
    assert slave.status()["role"] == "SLAVE"
    refused = AuditRecord.objects.get(action="cluster.promote")
    assert refused.status == AuditRecord.Status.FAILED
    assert refused.object_id == "broker-a:1"

    master.kill()
    _wait(lambda: registry.find("broker-a", 0) is None, 3 * EXPIRY_S, "expiry")
    body = _promote(admin, "broker-a:1", reason="master host lost")
    assert "broker-a:1 is now a ASYNC_MASTER" in body, body[-3000:]
    done = AuditRecord.objects.filter(action="cluster.promote").latest("id")
    assert done.status == AuditRecord.Status.SUCCESS
    assert done.reason == "master host lost"
    assert done.after["role"] == "ASYNC_MASTER"

    # The promoted node serves as broker-a's master: routes follow, it takes
    # writes, and what it replicated is there.
    _wait(lambda: (registry.find("broker-a") or None) is not None
          and registry.find("broker-a").is_master, 10, "the route")  # fmt: skip
    assert slave.status()["role"] == "ASYNC_MASTER"
    assert slave.send("orders", b"after").status.code == pb.OK
    found = slave.messages("orders")
    assert len(found) == 6, found
    assert {m["msg_id"] for m in found} >= {r.entries[0].message_id for r in sent}
    # Promoting it again is refused: it is a master now.
    assert "already a master" in _promote(admin, "broker-a:1")


def test_the_old_master_never_serves_beside_the_promoted_one(pair, tmp_path):
    """A promotion forced while the master still runs (cut off, as far as the
    operator could tell): the old master fences itself (no writes, out of the
    routes); restarted as a master it refuses to serve; restarted as the new
    master's slave it follows it and holds what the new master wrote."""
    master, slave, registry = pair
    sent = [master.send("orders", f"m{i}".encode()) for i in range(5)]
    assert all(r.status.code == pb.OK for r in sent)
    end = master.status()["log_end"]
    _wait(lambda: slave.status()["log_end"] >= end, 30, "the slave caught up")
    done = slave.ops.promote("ann", force=True)
    assert done["role"] == "ASYNC_MASTER"
    assert slave.send("orders", b"after").status.code == pb.OK

    # The old master sees a newer master of its name and fences itself.
    _wait(lambda: master.status().get("fenced"), 20, "the fence")
    # A send that still reaches it is passed to the new master (forward.py):
    # stored there, never here.
    fenced_end = master.status()["log_end"]
    assert master.send("orders", b"split").status.code == pb.OK
    assert master.status()["log_end"] == fenced_end
    split = slave.messages("orders")
    assert len(split) == 7, split  # the 5, "after" and "split"
    at_slave = [f"127.0.0.1:{slave.grpc}"]
    _wait(lambda: registry.find("broker-a", 0).endpoints == at_slave, 20, "routes")
    # Clients that still ask the fenced node are routed to the new master
    # (it answered broker-a:0's queues with its own address, by name and id).
    stub = sgrpc.MessagingServiceStub(grpc.insecure_channel(f"127.0.0.1:{master.grpc}"))
    route = stub.QueryRoute(
        spb.QueryRouteRequest(topic=pb.Resource(name="orders")), timeout=10
    )
    brokers_a = [q for q in route.message_queues if q.broker.name == "broker-a"]
    assert brokers_a, route
    for q in brokers_a:
        assert [f"{a.host}:{a.port}" for a in q.broker.endpoints.addresses] == at_slave
    ha = slave.status()
    master.kill()

    # Restarted as a master, it will not serve.
    again = _Node(tmp_path, registry.cluster, "broker-a:0", "--ha-listen",
                  f"127.0.0.1:{free_port()}", "--ha-secret-file",
                  str(tmp_path / "ha.secret"), store="broker-a-0")  # fmt: skip
    _Node.extra.append(again)
    assert again.proc.wait(timeout=60) != 0
    assert "already has a live master" in again.log.read_text()

    # Restarted as the new master's slave, it follows it.
    ha_addr = next(a for a in _ha_listen(slave))
    follower = _Node(tmp_path, registry.cluster, "broker-a:2", "--master-ha", ha_addr,
                     "--ha-secret-file", str(tmp_path / "ha.secret"),
                     store="broker-a-0")  # fmt: skip
    _Node.extra.append(follower)
    new_end = slave.status()["log_end"]
    _wait(lambda: (_try(follower) or {}).get("log_end") == new_end,
          60, "rejoined")  # fmt: skip
    found = follower.messages("orders")
    assert len(found) == 7 and ha["epoch"] >= 2  # the new master's 7


def _try(node: _Node) -> dict | None:
    """``node.status()``, or None while the node does not answer yet."""
    try:
        return node.status()
    except NodeUnavailableError:
        return None


def _ha_listen(node: _Node) -> list[str]:
    """The ``--ha-listen`` address a node was started with."""
    args = node.proc.args
    return [args[i + 1] for i, a in enumerate(args) if a == "--ha-listen"]


def test_a_slave_promotes_itself_once_its_master_is_gone(tmp_path):
    """``--auto-promote-after``: the master SIGKILLed, its registration
    expires, its slave promotes itself, takes writes and keeps what it
    replicated; the old master cannot come back as a second master."""
    cluster = f"auto-{uuid.uuid4().hex[:10]}"
    (tmp_path / "admin.token").write_text(TOKEN + "\n")
    (tmp_path / "ha.secret").write_text("auto-promote-secret\n")
    with Broker.open(str(tmp_path / "broker-a-0")) as b:
        b.create_topic("orders", 2, 2)
    ha = free_port()
    secret = ("--ha-secret-file", str(tmp_path / "ha.secret"))
    registry = RouteRegistry(REGISTRY_URL, cluster, EXPIRY_S)
    master = _Node(tmp_path, cluster, "broker-a:0", "--ha-listen",
                   f"127.0.0.1:{ha}", *secret)  # fmt: skip
    slave = _Node(tmp_path, cluster, "broker-a:1", "--master-ha", f"127.0.0.1:{ha}",
                  "--auto-promote-after", "1", *secret)  # fmt: skip
    _Node.extra += [master, slave]
    try:
        _wait(lambda: {n.key for n in registry.nodes()} == {"broker-a:0", "broker-a:1"},
              60, "both nodes registered")  # fmt: skip
        sent = [master.send("orders", f"m{i}".encode()) for i in range(5)]
        assert all(r.status.code == pb.OK for r in sent)
        end = master.status()["log_end"]
        _wait(lambda: slave.status()["log_end"] >= end, 30, "caught up")
        # While the master lives, nothing happens.
        time.sleep(2.5)
        assert slave.status()["role"] == "SLAVE"

        master.kill()
        killed = time.monotonic()
        at_slave = [f"127.0.0.1:{slave.grpc}"]

        def routed() -> bool:
            live = registry.find("broker-a", 0)
            return live is not None and live.endpoints == at_slave

        _wait(routed, 30, "the slave promoted and routed to")
        took = time.monotonic() - killed
        status = slave.status()
        assert status["role"] == "ASYNC_MASTER" and status["auto_promoted"] is True
        # Expiry (3 s) plus the second it waits, plus a poll or two.
        assert took < EXPIRY_S + 1 + 5, took
        assert slave.send("orders", b"after").status.code == pb.OK
        found = slave.messages("orders")
        assert len(found) == 6

        again = _Node(tmp_path, cluster, "broker-a:0", "--ha-listen",
                      f"127.0.0.1:{free_port()}", *secret,
                      store="broker-a-0")  # fmt: skip
        _Node.extra.append(again)
        assert again.proc.wait(timeout=60) != 0
        assert "already has a live master" in again.log.read_text()
    finally:
        for node in _Node.extra:
            node.kill()
        _Node.extra.clear()
        keys = list(registry.redis.scan_iter(f"{registry.prefix}:*"))
        if keys:
            registry.redis.delete(*keys)


def test_a_slave_started_before_its_master_does_not_promote_itself(tmp_path):
    cluster = f"cold-{uuid.uuid4().hex[:10]}"
    (tmp_path / "admin.token").write_text(TOKEN + "\n")
    (tmp_path / "ha.secret").write_text("cold-start-secret\n")
    registry = RouteRegistry(REGISTRY_URL, cluster, EXPIRY_S)
    slave = _Node(tmp_path, cluster, "broker-a:1", "--master-ha",
                  f"127.0.0.1:{free_port()}", "--auto-promote-after", "1",
                  "--ha-secret-file", str(tmp_path / "ha.secret"))  # fmt: skip
    try:
        _wait(lambda: _try(slave), 60, "the slave up")
        time.sleep(EXPIRY_S + 2)  # no master ever: it waits for one
        assert slave.status()["role"] == "SLAVE"
        assert registry.find("broker-a", 0) is None
    finally:
        slave.kill()
        keys = list(registry.redis.scan_iter(f"{registry.prefix}:*"))
        if keys:
            registry.redis.delete(*keys)
