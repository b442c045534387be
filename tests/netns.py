"""Hosts for cluster tests: network namespaces joined by a bridge.

Each ``Host`` is a network namespace with its own address on a private bridge
(``BROKER_TEST_SUBNET``, default 198.51.100.0/24, a documentation range
nothing routes: set another /24 where that one is in use); processes started
on it see only its interface, so nodes talk to each other over a real
network path, and killing a host kills every process in its namespace. The
test process itself stays in the root namespace at .1 of that range, where the
official clients run. Needs root (CI runs as root); elsewhere the tests skip
saying why.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

from broker_core import Broker
from tests.support import subnet_prefix

ROOT = Path(__file__).resolve().parents[1]

#: the first three octets of the bridge's /24
#: the first three octets of the range (the first of a list: tests/workers.py
#: gives each pytest-xdist worker its own)
SUBNET = subnet_prefix(os.environ.get("BROKER_TEST_SUBNET", "198.51.100").split(",")[0])


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check)


class Host:
    """One network namespace with an address on the bridge."""

    def __init__(self, net: Network, name: str, address: str) -> None:
        self.net = net
        self.name = name
        self.netns = f"{net.tag}-{name}"
        self.address = address
        self.procs: list[subprocess.Popen] = []

    def popen(self, args: list[str], log: Path, **kw) -> subprocess.Popen:
        """Start ``args`` on this host, output to ``log``."""
        out = open(log, "ab")  # closed with the process's end (kept by Popen)
        proc = subprocess.Popen(
            ["ip", "netns", "exec", self.netns, *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            **kw,
        )
        out.close()
        self.procs.append(proc)
        return proc

    def pids(self) -> list[int]:
        found = _ip("netns", "pids", self.netns, check=False).stdout.split()
        return [int(p) for p in found]

    def kill(self) -> None:
        """SIGKILL every process of the host: a machine that dies."""
        for pid in self.pids():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for proc in self.procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        self.procs.clear()


class Network:
    """A bridge in the root namespace and the hosts attached to it."""

    def __init__(self) -> None:
        self.tag = f"rmq{uuid.uuid4().hex[:5]}"
        self.bridge = f"{self.tag}br"
        self.hosts: dict[str, Host] = {}
        _ip("link", "add", self.bridge, "type", "bridge")
        _ip("addr", "add", f"{SUBNET}.1/24", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")

    def host(self, name: str) -> Host:
        host = Host(self, name, f"{SUBNET}.{10 + len(self.hosts)}")
        veth = f"{self.tag}v{len(self.hosts)}"
        _ip("netns", "add", host.netns)
        _ip("link", "add", veth, "type", "veth", "peer", "name", "eth0",
            "netns", host.netns)  # fmt: skip
        _ip("link", "set", veth, "master", self.bridge, "up")
        for args in (
            ("addr", "add", f"{host.address}/24", "dev", "eth0"),
            ("link", "set", "eth0", "up"),
            ("link", "set", "lo", "up"),
        ):
            _ip("-n", host.netns, *args)
        self.hosts[name] = host
        return host

    def close(self) -> None:
        for host in self.hosts.values():
            host.kill()
            _ip("netns", "del", host.netns, check=False)
        _ip("link", "del", self.bridge, check=False)


def netns_unavailable() -> str | None:
    """Why namespaces cannot be made here, or None."""
    if os.geteuid() != 0:
        return "network namespaces need root (CI runs as root)"
    if shutil.which("ip") is None:
        return "no `ip` command (Debian's iproute2)"
    probe = f"rmqprobe{os.getpid()}"
    done = _ip("netns", "add", probe, check=False)
    if done.returncode != 0:
        return f"cannot create a network namespace: {done.stderr.strip()}"
    _ip("netns", "del", probe, check=False)
    return None


def wait_port(host: str, port: int, timeout: float = 30.0) -> None:
    import socket

    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection((host, port), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


class Cluster:
    """A route registry (redis-server) on host ``registry`` and hosts ``a``,
    ``b``, ``s`` for nodes; ``serve`` starts a node on one of them."""

    def __init__(self, net: Network, tmp: Path, topic: str, expiry: float) -> None:
        self.net, self.tmp = net, tmp
        self.topic, self.expiry = topic, expiry
        self.registry = net.host("registry")
        self.a, self.b, self.s = net.host("a"), net.host("b"), net.host("s")
        self.secret = tmp / "ha.secret"
        self.secret.write_text("cluster-test-secret\n")
        self.registry_url = f"redis://{self.registry.address}:6379/0"
        self.registry.popen(
            [shutil.which("redis-server") or "redis-server", "--bind",
             self.registry.address, "--port", "6379", "--save", "", "--appendonly",
             "no", "--protected-mode", "no"],
            tmp / "redis.log",
        )  # fmt: skip
        wait_port(self.registry.address, 6379)

    def store(self, name: str, topic_queues: int | None = 4) -> Path:
        path = self.tmp / f"store-{name}"
        with Broker.open(str(path)) as broker:
            if topic_queues:
                broker.create_topic(self.topic, topic_queues, topic_queues)
        return path

    def serve(self, host, store: Path, node: str, *extra: str) -> None:
        host.popen(
            [sys.executable, "-m", "broker_core", "serve", "--store", str(store),
             "--listen", f"{host.address}:8081", "--cluster", "c1", "--node", node,
             "--registry", self.registry_url, "--registry-expiry", str(self.expiry),
             "--embedded-timers", "--transaction-timeout-ms", "1000",
             "--no-topic-type-check",  # cluster_client sends halves, delays
             "--check-interval-ms", "4000", "--no-redis-relay", *extra],
            self.tmp / f"{host.name}.log", cwd=ROOT,
        )  # fmt: skip
        wait_port(host.address, 8081)

    def access(self, host) -> str:
        return f"{host.address}:8081"

    def nodes(self) -> list[dict]:
        from broker_core.cluster import RouteRegistry

        reg = RouteRegistry(self.registry_url, "c1", self.expiry)
        return [{"key": n.key, "role": n.role, "log_end": n.log_end,
                 "master_log_end": n.master_log_end} for n in reg.nodes()]  # fmt: skip

    def wait_nodes(self, want: set[str], timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while {n["key"] for n in self.nodes()} != want:
            assert time.monotonic() < deadline, (self.nodes(), want)
            time.sleep(0.2)
