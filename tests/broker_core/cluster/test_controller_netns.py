"""The controller across hosts: network namespaces on a bridge (``tests/netns.py``)
with a 3-member etcd on hosts of its own, and an asymmetric partition.

Hosts: ``registry`` (redis-server), ``e0``-``e2`` (one etcd member each),
``a`` (broker-a, SYNC_MASTER), ``s`` (its slave), ``b`` (broker-b). The
official Python client sends one message at a time from the test's own
host, its access point every node. Then host ``a`` loses its routes to the
etcd hosts, the registry and the slave (blackhole routes in its namespace)
while the client still reaches it: the master's lease runs out, it stops
writing, the slave is elected. After the partition heals the old master is
refused as a master, rejoins as the new master's slave and cuts what it took
without a lease: none of it was acknowledged.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from broker_core.cluster.controller import ControllerUnavailable, Etcd
from broker_core.shared import read_commit_pos
from tests.broker_core.cluster.test_cluster_netns import ROOT, stored_keys
from tests.etcd import etcd_unavailable
from tests.netns import Cluster, _ip

pytestmark = [pytest.mark.slow, pytest.mark.protocol, pytest.mark.services]

if etcd_unavailable():
    pytestmark.append(pytest.mark.skip(reason=str(etcd_unavailable())))

CLIENT = Path(__file__).with_name("cluster_client.py")
TOPIC = "orders"
EXPIRY = 3.0
TTL = 3


def start_etcd(net, tmp: Path) -> str:
    hosts = [net.host(f"e{i}") for i in range(3)]
    initial = ",".join(f"{h.name}=http://{h.address}:2380" for h in hosts)
    for h in hosts:
        h.popen(
            ["etcd", "--name", h.name, "--data-dir", str(tmp / f"etcd-{h.name}"),
             "--listen-client-urls", f"http://{h.address}:2379",
             "--advertise-client-urls", f"http://{h.address}:2379",
             "--listen-peer-urls", f"http://{h.address}:2380",
             "--initial-advertise-peer-urls", f"http://{h.address}:2380",
             "--initial-cluster", initial, "--initial-cluster-token", tmp.name,
             "--initial-cluster-state", "new", "--log-level", "warn"],
            tmp / f"etcd-{h.name}.log",
        )  # fmt: skip
    urls = ",".join(f"http://{h.address}:2379" for h in hosts)
    etcd = Etcd.from_url(urls)
    deadline = time.monotonic() + 30
    while True:
        try:
            etcd.txn([], [etcd.put_op("/health", 1)])
            return urls
        except ControllerUnavailable:
            assert time.monotonic() < deadline, "etcd did not form a quorum"
            time.sleep(0.2)


def partition(host, *others, heal: bool = False) -> None:
    """Drop (or restore) ``host``'s packets to ``others``: a one-sided cut
    (what reaches it gets no answer), the test's own host still reaching it."""
    for o in others:
        _ip("-n", host.netns, "route", "del" if heal else "add", "blackhole",
            f"{o.address}/32")  # fmt: skip


def three_hosts(network, tmp_path):
    """etcd, the registry, broker-a's master and slave, broker-b: up, the
    slave in the in-sync set."""
    c = Cluster(network, tmp_path, TOPIC, EXPIRY)
    urls = start_etcd(network, tmp_path)
    etcd = Etcd.from_url(urls)
    ctl = ("--controller", urls, "--lease-ttl", str(TTL),
           "--ha-secret-file", str(c.secret))  # fmt: skip
    c.serve(c.a, c.store("a"), "broker-a", "--role", "SYNC_MASTER",
            "--ha-listen", f"{c.a.address}:10912", *ctl)  # fmt: skip
    c.serve(c.b, c.store("b"), "broker-b")  # 4 queues, as broker-a
    c.serve(c.s, c.store("s", None), "broker-a", "--broker-id", "1",
            "--master-ha", f"{c.a.address}:10912",
            "--ha-listen", f"{c.s.address}:10912", *ctl)  # fmt: skip
    c.wait_nodes({"broker-a:0", "broker-a:1", "broker-b:0"})
    slave_id = f"broker-a/1@{c.s.address}:8081"
    isr = "/rocketmq/c1/broker-a/isr"
    deadline = time.monotonic() + 30
    while (etcd.get(isr)[0] or {}).get("members") != [slave_id]:
        assert time.monotonic() < deadline, etcd.get(isr)
        time.sleep(0.2)

    return c, etcd, ctl, slave_id


def steady(c, tmp_path):
    access = ";".join(c.access(h) for h in (c.a, c.b, c.s))
    return subprocess.Popen(
        [sys.executable, str(CLIENT), "steady", access, TOPIC, "120",
         str(tmp_path / "steady")],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT,
    )  # fmt: skip


def results(sender, tmp_path) -> dict:
    (tmp_path / "steady.stop").touch()
    out, _ = sender.communicate(timeout=60)
    lines = [x for x in out.splitlines() if x.startswith("RESULT ")]
    assert lines, out[-3000:]
    result = json.loads(lines[-1][len("RESULT ") :])
    (tmp_path / "steady.json").write_text(json.dumps(result))
    return result


def elected(etcd, slave_id: str, since: float) -> float:
    """Seconds from ``since`` until the quorum elected ``slave_id``."""
    while (etcd.get("/rocketmq/c1/broker-a/leader")[0] or {}).get("node") != slave_id:
        assert time.monotonic() - since < 30, "the slave was not elected"
        time.sleep(0.1)
    return time.monotonic() - since


def rejoin_and_check(c, ctl, tmp_path, result, least: int) -> tuple[set, set]:
    """The old master rejoins as the new master's slave; every acknowledged
    message is held by a survivor, what it cut was never acknowledged, and
    failed sends (if any) span under 5 s. Returns (acknowledged, cut keys)."""
    acked = {body for body, _at, _broker in result["sent"]}
    assert len(acked) >= least, (len(acked), result["failed"][:5])
    c.a.kill()
    c.serve(c.a, tmp_path / "store-a", "broker-a", "--broker-id", "2",
            "--master-ha", f"{c.s.address}:10912", *ctl)  # fmt: skip
    c.wait_nodes({"broker-a:0", "broker-a:2", "broker-b:0"}, timeout=30)
    held = stored_keys(tmp_path / "store-s") | stored_keys(tmp_path / "store-b")
    lost = sorted(acked - held)
    assert not lost, (len(lost), lost[:10])
    cut_keys = set()
    for path in sorted((tmp_path / "store-a" / "ha" / "cut").glob("*.json")):
        cut_keys |= {m["keys"] for m in json.loads(path.read_bytes())["listed"]}
    # What the old master took alone was never acknowledged (a client retry
    # of it may have been, on another node: then it is held there).
    assert not [k for k in cut_keys & acked if k not in held]
    failed = result["failed"]
    # Clients hardly notice: the old master refuses, times out or gives no
    # route, and the official client retries on the next queue, broker-b's.
    if failed:
        span = max(at for _b, at, _e in failed) - min(at for _b, at, _e in failed)
        assert span < 5, (span, failed[:5])
    return acked, cut_keys


def test_an_asymmetric_partition_loses_no_acknowledged_message(network, tmp_path):
    c, etcd, ctl, slave_id = three_hosts(network, tmp_path)
    others = (c.registry, c.s, *(network.hosts[f"e{i}"] for i in range(3)))
    sender = steady(c, tmp_path)
    try:
        time.sleep(5)
        partition(c.a, *others)
        cut_at = time.monotonic()
        took = elected(etcd, slave_id, cut_at)
        # The cut-off master stopped writing before that, and writes nothing
        # although the client still reaches it.
        end = read_commit_pos(tmp_path / "store-a")
        time.sleep(5)
        assert read_commit_pos(tmp_path / "store-a") == end
        partition(c.a, *others, heal=True)
        time.sleep(5)  # healed: the old master still takes nothing
        assert read_commit_pos(tmp_path / "store-a") == end
    finally:
        result = results(sender, tmp_path)
    acked, cut = rejoin_and_check(c, ctl, tmp_path, result, 200)
    print(f"asymmetric: elected {took:.1f} s after the cut; {len(acked)} sends "
          f"acknowledged, {len(result['failed'])} failed; {len(cut)} "
          "unacknowledged messages cut from the old master")  # fmt: skip


def test_a_master_host_cut_off_entirely_loses_no_acknowledged_message(
    network, tmp_path
):
    """A symmetric cut: the master's host link goes down (nobody reaches it,
    clients included), then comes back."""
    c, etcd, ctl, slave_id = three_hosts(network, tmp_path)
    sender = steady(c, tmp_path)
    try:
        # 7 s before the cut: the client's start-up under load took up to 2 s
        # of the 5 it had (86-89 acknowledged against the 90 asked below).
        time.sleep(7)
        _ip("-n", c.a.netns, "link", "set", "eth0", "down")
        cut_at = time.monotonic()
        took = elected(etcd, slave_id, cut_at)
        end = read_commit_pos(tmp_path / "store-a")
        time.sleep(5)
        assert read_commit_pos(tmp_path / "store-a") == end
        _ip("-n", c.a.netns, "link", "set", "eth0", "up")
        time.sleep(5)
        assert read_commit_pos(tmp_path / "store-a") == end
    finally:
        result = results(sender, tmp_path)
    # Nobody reaches the cut host: each send the client routes to it waits
    # out its 3 s request timeout before the retry on broker-b succeeds (the
    # Python client does not set the endpoint aside), until it next re-reads
    # the route. Slow, not failed: the 5 s before the cut are acknowledged.
    acked, cut = rejoin_and_check(c, ctl, tmp_path, result, 90)
    print(f"symmetric: elected {took:.1f} s after the cut; {len(acked)} sends "
          f"acknowledged, {len(result['failed'])} failed; {len(cut)} "
          "unacknowledged messages cut from the old master")  # fmt: skip


def test_a_killed_master_host_is_replaced_without_the_clients_noticing(
    network, tmp_path
):
    """SIGKILL of every process on the master's host while the official
    client sends with every node as its access point: no acknowledged message
    is lost, failed sends (if any) span under 5 s, and the client reaches the
    promoted slave within the lease, not at its next route refresh (30 s):
    its channel for broker-a's queues lists broker-a's master and slave, and
    the slave forwards to its master until it is elected itself."""
    c, etcd, ctl, slave_id = three_hosts(network, tmp_path)
    sender = steady(c, tmp_path)
    try:
        # Past the client's first route refresh (10 s after it starts; then
        # every 30 s): a route re-read is not what takes it to the slave.
        time.sleep(12)
        killed = time.time()
        c.a.kill()
        took = elected(etcd, slave_id, time.monotonic())
        time.sleep(12)
    finally:
        result = results(sender, tmp_path)
    # broker-a's sends after the kill that the dead master does not hold
    # were stored by the promoted slave.
    old = stored_keys(tmp_path / "store-a")
    after = sorted(
        at
        for body, at, broker in result["sent"]
        if broker == "broker-a" and at > killed and body not in old
    )
    assert after, "no send reached the promoted slave"
    first = after[0] - killed
    assert first < TTL + 6, (first, took)
    # What the old master cut on rejoining (a send it stored while waiting
    # for the slave when it died) was never acknowledged: rejoin_and_check.
    acked, cut = rejoin_and_check(c, ctl, tmp_path, result, 200)
    print(f"kill: elected {took:.1f} s after the kill; first send on the promoted "
          f"slave {first:.1f} s after it; {len(acked)} sends acknowledged, "
          f"{len(result['failed'])} failed")  # fmt: skip


def test_a_stalled_slave_then_a_killed_master_lose_no_acknowledged_message(
    network, tmp_path
):
    """The slave's host stalls (SIGSTOP of its processes) while the client
    sends: the SYNC master acknowledges nothing the slave lacks (sends go to
    broker-b meanwhile) and empties its in-sync set; resumed, the slave
    catches up and is in the set again; then the master's host dies and the
    slave, elected, holds every acknowledged message."""
    import os
    import signal

    c, etcd, ctl, slave_id = three_hosts(network, tmp_path)
    isr = "/rocketmq/c1/broker-a/isr"
    sender = steady(c, tmp_path)
    try:
        time.sleep(5)
        stalled = c.s.pids()
        for pid in stalled:
            os.kill(pid, signal.SIGSTOP)
        try:
            deadline = time.monotonic() + 20
            while (etcd.get(isr)[0] or {}).get("members"):
                assert time.monotonic() < deadline, "the stalled slave stayed in sync"
                time.sleep(0.2)
        finally:
            for pid in stalled:
                os.kill(pid, signal.SIGCONT)
        deadline = time.monotonic() + 30
        while (etcd.get(isr)[0] or {}).get("members") != [slave_id]:
            assert time.monotonic() < deadline, "the slave did not rejoin the set"
            time.sleep(0.2)
        time.sleep(2)
        c.a.kill()
        took = elected(etcd, slave_id, time.monotonic())
        time.sleep(5)
    finally:
        result = results(sender, tmp_path)
    acked, cut = rejoin_and_check(c, ctl, tmp_path, result, 200)
    print(f"stall then kill: elected {took:.1f} s after the kill; {len(acked)} "
          f"sends acknowledged, {len(result['failed'])} failed; {len(cut)} "
          "unacknowledged messages cut from the old master")  # fmt: skip
