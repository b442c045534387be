"""The route registry on a real Redis: registrations expire, routes take each
broker name's live master, or its slave read-only when the master is gone."""

from __future__ import annotations

import threading
import time
import uuid

import pytest

from broker_core.cluster import Heartbeat, NodeInfo, RouteRegistry, TopicQueues
from tests.support import redis_db

REDIS = redis_db(14)


@pytest.fixture
def registry():
    reg = RouteRegistry(REDIS, f"test-{uuid.uuid4().hex[:8]}", expiry_s=0.6)
    yield reg
    for key in reg.redis.scan_iter(f"{reg.prefix}:*"):
        reg.redis.delete(key)


def node(reg, name, broker_id=0, role="ASYNC_MASTER", **topics):
    return NodeInfo(
        reg.cluster,
        name,
        broker_id,
        role,
        endpoints=[f"127.0.0.1:{9000 + broker_id}"],
        topics={t: TopicQueues(*q) for t, q in topics.items()},
    )


def test_route_spans_masters_and_expires(registry):
    registry.register(node(registry, "broker-a", orders=(4, 4)))
    registry.register(node(registry, "broker-b", orders=(2, 2), other=(1, 1)))
    route = registry.route("orders")
    assert sorted((e.node.name, e.queue_id, e.perm) for e in route) == [
        ("broker-a", 0, 6), ("broker-a", 1, 6), ("broker-a", 2, 6), ("broker-a", 3, 6),
        ("broker-b", 0, 6), ("broker-b", 1, 6),
    ]  # fmt: skip
    # Nodes interleaved: a producer's retry on the next queue is on another node.
    assert [(e.node.name, e.queue_id) for e in route] == [
        ("broker-a", 0), ("broker-b", 0), ("broker-a", 1), ("broker-b", 1),
        ("broker-a", 2), ("broker-a", 3),
    ]  # fmt: skip
    assert [e.node.name for e in registry.route("other")] == ["broker-b"]
    assert registry.route("missing") == []
    # broker-b stops heartbeating; broker-a keeps going: only b drops out.
    deadline = time.monotonic() + 1.5
    while time.monotonic() < deadline:
        registry.register(node(registry, "broker-a", orders=(4, 4)))
        time.sleep(0.1)
    assert {e.node.name for e in registry.route("orders")} == {"broker-a"}
    assert [n.key for n in registry.nodes()] == ["broker-a:0"]
    assert registry.redis.smembers(f"{registry.prefix}:nodes") == {b"broker-a:0"}


def test_slave_serves_read_only_when_its_master_is_gone(registry):
    registry.register(node(registry, "broker-a", orders=(2, 2)))
    registry.register(node(registry, "broker-a", 1, "SLAVE", orders=(2, 2)))
    # Master alive: the slave is not in the route.
    assert {(e.node.broker_id, e.perm) for e in registry.route("orders")} == {(0, 6)}
    registry.unregister("broker-a", 0)
    route = registry.route("orders")
    assert {(e.node.broker_id, e.queue_id, e.perm) for e in route} == {
        (1, 0, 4),
        (1, 1, 4),
    }
    # A promoted slave registers as master: writable again.
    registry.register(node(registry, "broker-a", 1, "SYNC_MASTER", orders=(2, 2)))
    assert {e.perm for e in registry.route("orders")} == {6}


def test_read_and_write_queue_counts_and_permissions(registry):
    registry.register(node(registry, "broker-a", t=(3, 1)))
    ro = node(registry, "broker-b", t=(1, 1))
    ro.topics["t"].perm = 4  # read-only topic on b
    registry.register(ro)
    got = sorted((e.node.name, e.queue_id, e.perm) for e in registry.route("t"))
    assert got == [("broker-a", 0, 6), ("broker-a", 1, 4), ("broker-a", 2, 4),
                   ("broker-b", 0, 4)]  # fmt: skip


def test_changes_are_announced_and_heartbeat_keeps_a_node_alive(registry):
    seen: list[str] = []
    got = threading.Event()

    def on_change(member):
        seen.append(member)
        got.set()

    stop = registry.subscribe(on_change)
    try:
        time.sleep(0.2)
        topics = {"orders": TopicQueues(1, 1)}
        beat = Heartbeat(
            registry,
            lambda: NodeInfo(registry.cluster, "broker-c", topics=dict(topics)),
            interval=0.1,
        ).start()
        assert got.wait(2) and seen[0] == "broker-c:0"
        got.clear()
        time.sleep(1.0)  # longer than the expiry: the beats keep it
        assert [n.name for n in registry.nodes()] == ["broker-c"]
        assert not got.is_set()  # heartbeats that change nothing are silent
        topics["payments"] = TopicQueues(2, 2)
        assert got.wait(2)
        assert [e.node.name for e in registry.route("payments")] == ["broker-c"] * 2
        beat.stop()
        assert registry.nodes() == []
    finally:
        stop()


def test_bad_registrations_are_refused(registry):
    with pytest.raises(ValueError, match="unknown role"):
        registry.register(node(registry, "x", role="BOSS"))
    other = node(registry, "x")
    other.cluster = "elsewhere"
    with pytest.raises(ValueError, match="cluster"):
        registry.register(other)
    with pytest.raises(ValueError):
        RouteRegistry(REDIS, "")
