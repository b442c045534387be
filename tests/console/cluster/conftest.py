"""Nodes for the console's cluster page without network namespaces: real
stores on ``tmp_path``, each with its endpoint's real ``AdminServer`` on
127.0.0.1, registered in a real route registry (the local Redis, a database
no other test uses, a cluster name of this test's own)."""

from __future__ import annotations

import selectors
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from broker_core import Broker
from broker_core.cluster import NodeInfo, RouteRegistry
from tests.conftest import ROOT
from tests.console.conftest import ADMIN_TOKEN, SMALL_STORE
from tests.support import free_port as _free_port
from tests.support import redis_db

REGISTRY_URL = redis_db(11)
TOKEN = ADMIN_TOKEN


class Nodes:
    """Start nodes, register them; ``close()`` stops them and unregisters."""

    def __init__(self, tmp: Path, cluster: str) -> None:
        self.tmp = tmp
        self.registry = RouteRegistry(REGISTRY_URL, cluster, expiry_s=120)
        self.brokers: dict[str, Broker] = {}
        self.endpoints: dict[str, Any] = {}
        self._stops: list[Any] = []

    def register(
        self, name: str, admin: str, role: str = "ASYNC_MASTER", broker_id: int = 0
    ) -> None:
        self.registry.register(
            NodeInfo(
                cluster=self.registry.cluster,
                name=name,
                broker_id=broker_id,
                role=role,
                endpoints=[f"{name}.invalid:8081"],
                admin=admin,
            )
        )

    def start(
        self, name: str, role: str = "ASYNC_MASTER", broker_id: int = 0
    ) -> Broker:
        """A store, its endpoint (``endpoints[key]``) and admin API, the node
        registered with ``role``; return the store's broker."""
        from broker_core.cluster.admin import AdminServer
        from broker_core.endpoint.config import EndpointConfig
        from broker_core.endpoint.server import Endpoint

        key = f"{name}:{broker_id}"
        # Ids carry the store's host: distinct per node, as serve --cluster
        # makes them (two nodes would otherwise hand out the same ids).
        host = f"127.0.0.1:{20000 + len(self.brokers)}"
        broker = Broker.open(
            str(self.tmp / key.replace(":", "-")), store_host=host, **SMALL_STORE
        )
        ep = Endpoint(broker, EndpointConfig())
        admin = AdminServer(ep, "127.0.0.1:0", TOKEN).start()
        self._stops += [broker.close, ep.close, admin.stop]
        self.brokers[key] = broker
        self.endpoints[key] = ep
        self.register(name, f"http://{admin.address}", role, broker_id)
        return broker

    def serve(self, name: str) -> str:
        """``python -m broker_core serve`` in its own process, its gRPC
        endpoint and admin API on free ports, registered as the master
        ``name``; return the gRPC address clients call."""
        token = self.tmp / "serve.token"
        token.write_text(TOKEN + "\n")
        grpc, admin = _free_port(), _free_port()
        proc = subprocess.Popen(
            [sys.executable, "-m", "broker_core", "serve",
             "--store", str(self.tmp / f"served-{name}"),
             "--listen", f"127.0.0.1:{grpc}", "--admin-listen", f"127.0.0.1:{admin}",
             "--admin-token-file", str(token), "--no-redis-relay"],
            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip

        def stop() -> None:
            proc.terminate()
            proc.wait(timeout=20)

        self._stops.append(stop)
        deadline = time.monotonic() + 30
        for port in (admin, grpc):
            while True:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                    break
                except OSError:
                    assert proc.poll() is None, "serve exited"
                    assert time.monotonic() < deadline, "serve did not listen"
                    time.sleep(0.1)
        self.register(name, f"http://127.0.0.1:{admin}")
        return f"127.0.0.1:{grpc}"

    def silent(self, *names: str) -> SilentListener:
        """Nodes whose admin address (one socket for all of them) accepts
        connections and never answers."""
        listener = SilentListener()
        self._stops.append(listener.close)
        for name in names:
            self.register(name, f"http://127.0.0.1:{listener.port}")
        return listener

    def close(self) -> None:
        for stop in reversed(self._stops):
            stop()
        keys = list(self.registry.redis.scan_iter(f"{self.registry.prefix}:*"))
        if keys:
            self.registry.redis.delete(*keys)


class SilentListener:
    """A real listening socket that accepts, reads and never answers (a host
    whose service hangs); counts the connections open at once."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0), backlog=64)
        self.sock.setblocking(False)
        self.port = self.sock.getsockname()[1]
        self.open = 0
        self.most_open = 0
        self._sel = selectors.DefaultSelector()
        self._sel.register(self.sock, selectors.EVENT_READ)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            for key, _ in self._sel.select(timeout=0.1):
                if key.fileobj is self.sock:
                    conn, _ = self.sock.accept()
                    self._sel.register(conn, selectors.EVENT_READ)
                    self.open += 1
                    self.most_open = max(self.most_open, self.open)
                    continue
                conn = key.fileobj
                assert isinstance(conn, socket.socket)
                try:
                    data = conn.recv(65536)
                except OSError:
                    data = b""
                if not data:  # the caller gave up and closed
                    self._sel.unregister(conn)
                    conn.close()
                    self.open -= 1

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        for key in list(self._sel.get_map().values()):
            key.fileobj.close()  # type: ignore[union-attr]
        self._sel.close()


@pytest.fixture
def nodes(tmp_path: Path, settings: Any) -> Iterator[Nodes]:
    """An empty cluster the console is pointed at; add nodes with
    ``nodes.start(name)`` and ``nodes.silent(name)``."""
    cluster = f"test-{uuid.uuid4().hex[:12]}"
    token = tmp_path / "admin.token"
    token.write_text(TOKEN + "\n")
    settings.BROKER_CLUSTER = cluster
    settings.REGISTRY_URL = REGISTRY_URL
    settings.CLUSTER_ADMIN_TOKEN_FILE = str(token)
    found = Nodes(tmp_path, cluster)
    try:
        yield found
    finally:
        found.close()
