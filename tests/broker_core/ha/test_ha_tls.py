"""TLS on the HA link: a slave process replicates every record from a TLS
master, the bytes on the wire carry no message text, and every mismatch (an
untrusted certificate, another name, TLS on one side only) is refused with a
reason in the slave's status rather than left hanging."""

from __future__ import annotations

import json
import shutil
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from _hahelpers import (
    ROOT,
    SECRET,
    SETTINGS,
    assert_same_store,
    free_port,
    make_cert,
    redis_up,
    secret_file,
    slave_status,
    start_master,
    start_replicate,
    wait_for,
)

from broker_core import Broker, Message
from broker_core.ha import HAServer, SlaveFollower, start_ha_server
from broker_core.ha.tls import client_context, server_context
from broker_core.shared import read_commit_pos
from tests.support import redis_db

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="no openssl")


class Recorder:
    """A TCP relay on 127.0.0.1 that keeps every byte the master sends: to the
    master it is a plain TCP client."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.from_master = bytearray()
        self._lock = threading.Lock()
        self._srv = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self._srv.getsockname()[1]}"
        self._socks: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                down, _ = self._srv.accept()
                up = socket.create_connection(self.target)
            except OSError:
                return
            self._socks += [down, up]
            for args in ((up, down, True), (down, up, False)):
                threading.Thread(target=self._pipe, args=args, daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket, record: bool) -> None:
        try:
            while data := src.recv(65536):
                if record:
                    with self._lock:
                        self.from_master += data
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        self._srv.close()
        for s in self._socks:
            s.close()


def _stop(p: subprocess.Popen) -> None:  # type: ignore[type-arg]
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
    p.wait(timeout=30)


@pytest.mark.slow
@pytest.mark.parametrize("tls", [True, False], ids=["tls", "plain"])
def test_a_slave_process_replicates_every_record_and_tls_hides_them(
    tmp_path: Path, tls: bool
) -> None:
    cert, key = make_cert(tmp_path, "master", "IP:127.0.0.1")
    mdir, sdir, out = tmp_path / "master", tmp_path / "slave", tmp_path / "acts"
    secret = secret_file(tmp_path)
    port = free_port()
    opts = {"tls_cert": str(cert), "tls_key": str(key)} if tls else {}
    master = start_master(
        mdir, f"127.0.0.1:{port}", secret, out, count=3000, batch=50, **opts
    )
    relay = Recorder(("127.0.0.1", port))
    extra = ["--ha-tls-ca", str(cert)] if tls else []
    slave = start_replicate(sdir, relay.address, secret, *extra)
    try:
        assert master.stdout is not None
        assert master.stdout.readline().split()[0] == "DONE"
        end = read_commit_pos(mdir)
        wait_for(
            lambda: slave_status(sdir).get("replicated_offset") == end,
            60,
            "the slave to catch up",
        )
        assert slave_status(sdir)["tls"] is tls
    finally:
        _stop(slave)
        _stop(master)
        relay.close()
    m, s = Broker.open(mdir, **SETTINGS), Broker.open(sdir, **SETTINGS)
    try:
        assert assert_same_store(m, s) == 3000
    finally:
        s.close()
        m.close()
    # The slave reached the master through the relay only: all it has crossed it.
    wire = bytes(relay.from_master)
    if tls:
        # TLS records: a handshake record (0x16) first, then application data
        # (0x17), both of TLS 1.2's record version 0x0303; no body text.
        assert wire[:2] == b"\x16\x03"
        assert b"\x17\x03\x03" in wire
        assert b"m00000" not in wire and b"xxxxxxxxxxxxxxxx" not in wire
    else:
        # The control: the same relay sees the bodies of a plain link.
        assert b"m00000042." in wire and b"m00002999." in wire


@pytest.fixture
def master(tmp_path: Path) -> Iterator[Broker]:
    b = Broker.open(tmp_path / "master", **SETTINGS)
    b.send_batch([Message("T", b"body-%d" % i) for i in range(200)])
    yield b
    b.close()


@pytest.fixture
def slave(tmp_path: Path) -> Iterator[Broker]:
    b = Broker.open(tmp_path / "slave", **SETTINGS)
    yield b
    b.close()


def _refused(f: SlaveFollower) -> str:
    try:
        error = wait_for(lambda: f.status()["last_error"], 15, "an error")
        assert not f.status()["connected"]
        return str(error)
    finally:
        f.stop()


def test_a_slave_with_another_ca_is_refused_on_the_certificate(
    tmp_path: Path, master: Broker, slave: Broker
) -> None:
    cert, key = make_cert(tmp_path, "master", "IP:127.0.0.1")
    other, _ = make_cert(tmp_path, "other", "IP:127.0.0.1")
    srv = start_ha_server(master.store, "127.0.0.1:0", SECRET, tls=server_context(
        str(cert), str(key)))  # fmt: skip
    try:
        f = SlaveFollower(slave.store, srv.address, SECRET, tls=client_context(
            str(other))).start()  # fmt: skip
        error = _refused(f)
        assert "certificate of" in error and "failed verification" in error, error
        assert "self-signed" in error, error
        assert slave.store.max_physical_offset() == 0
        assert srv.replication_status() == []
    finally:
        srv.stop()


def test_the_certificate_must_name_the_master_or_the_server_name_given(
    tmp_path: Path, master: Broker, slave: Broker
) -> None:
    cert, key = make_cert(tmp_path, "master", "DNS:ha-master.test")
    srv = start_ha_server(master.store, "127.0.0.1:0", SECRET, tls=server_context(
        str(cert), str(key)))  # fmt: skip
    try:
        # Trusted CA, but the certificate does not name 127.0.0.1.
        f = SlaveFollower(slave.store, srv.address, SECRET, tls=client_context(
            str(cert))).start()  # fmt: skip
        error = _refused(f)
        assert "certificate" in error and "127.0.0.1" in error, error
        f = SlaveFollower(slave.store, srv.address, SECRET, tls=client_context(
            str(cert)), server_name="ha-master.test").start()  # fmt: skip
        try:
            end = master.store.max_physical_offset()
            wait_for(
                lambda: slave.store.max_physical_offset() == end, 20, "replication"
            )
            assert f.status()["tls"] and srv.replication_status()[0]["tls"]
            assert f.status()["last_error"] is None
        finally:
            f.stop()
        assert assert_same_store(master, slave) == 200
    finally:
        srv.stop()


def test_over_tls_a_sync_send_waits_for_the_slave_which_follows_a_restart(
    tmp_path: Path, master: Broker, slave: Broker
) -> None:
    cert, key = make_cert(tmp_path, "master", "IP:127.0.0.1")
    tls = server_context(str(cert), str(key))
    srv = start_ha_server(master.store, "127.0.0.1:0", SECRET, tls=tls)
    address = srv.address
    f = SlaveFollower(slave.store, address, SECRET, tls=client_context(
        str(cert))).start()  # fmt: skip
    try:
        wait_for(lambda: srv.replication_status(), 10, "the slave to connect")
        # The acks come back through the sender's own reads on a TLS link.
        for i in range(20):
            master.send(Message("T", b"sync-%d" % i))
            end = master.store.max_physical_offset()
            assert srv.wait_replicated(end, 5.0)
            assert slave.store.max_physical_offset() >= end
        srv.stop()
        wait_for(lambda: not f.status()["connected"], 15, "the slave to notice")
        master.send_batch([Message("T", b"after-%d" % i) for i in range(100)])
        srv = start_ha_server(master.store, address, SECRET, tls=tls)
        end = master.store.max_physical_offset()
        wait_for(lambda: slave.store.max_physical_offset() == end, 20, "a resume")
        assert f.status()["connects"] == 2
    finally:
        f.stop()
        srv.stop()
    assert assert_same_store(master, slave) == 320


def test_a_plain_slave_is_told_the_master_speaks_tls_only(
    tmp_path: Path, master: Broker, slave: Broker
) -> None:
    cert, key = make_cert(tmp_path, "master", "IP:127.0.0.1")
    srv = start_ha_server(master.store, "127.0.0.1:0", SECRET, tls=server_context(
        str(cert), str(key)))  # fmt: skip
    try:
        error = _refused(SlaveFollower(slave.store, srv.address, SECRET).start())
        assert "speaks TLS only" in error and "--ha-tls-ca" in error, error
        assert slave.store.max_physical_offset() == 0
    finally:
        srv.stop()


def test_a_tls_slave_is_told_the_master_is_plain(
    tmp_path: Path, master: Broker, slave: Broker, caplog: pytest.LogCaptureFixture
) -> None:
    cert, _ = make_cert(tmp_path, "master", "IP:127.0.0.1")
    srv: HAServer = start_ha_server(master.store, "127.0.0.1:0", SECRET)
    try:
        f = SlaveFollower(slave.store, srv.address, SECRET, tls=client_context(
            str(cert))).start()  # fmt: skip
        error = _refused(f)
        assert "TLS handshake" in error and "--ha-tls-cert" in error, error
        assert slave.store.max_physical_offset() == 0
        wait_for(lambda: "the slave speaks TLS" in caplog.text, 10, "the master's log")
    finally:
        srv.stop()


REGISTRY = redis_db(14)


@pytest.mark.slow
@pytest.mark.skipif(not redis_up(), reason="no Redis on 127.0.0.1:6379")
def test_serve_nodes_replicate_over_tls_with_a_server_name(tmp_path: Path) -> None:
    """``serve --ha-listen --ha-tls-cert/--ha-tls-key`` and ``serve --master-ha
    --ha-tls-ca --ha-tls-server-name``: the flags reach the link."""
    from broker_core.cluster import RouteRegistry

    cert, key = make_cert(tmp_path, "master", "DNS:ha.broker-a.test")
    mdir, sdir = tmp_path / "master", tmp_path / "slave"
    with Broker.open(mdir, **SETTINGS) as b:
        b.send_batch([Message("T", b"node-%d" % i) for i in range(300)])
        end = b.store.max_physical_offset()
    # A slave's log is laid out in the master's segments: its store is made
    # with the master's segment size (the serve command keeps a store's own).
    Broker.open(sdir, **SETTINGS).close()
    cluster = f"ha-tls-{free_port()}"
    ha = f"127.0.0.1:{free_port()}"
    common = [
        "--cluster",
        cluster,
        "--node",
        "broker-a",
        "--registry",
        REGISTRY,
        "--no-redis-relay",
        "--ha-secret-file",
        str(secret_file(tmp_path)),
    ]
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "broker_core",
                "serve",
                "--store",
                str(store),
                "--listen",
                f"127.0.0.1:{free_port()}",
                *common,
                *extra,
            ],
            cwd=ROOT,
            stdout=open(tmp_path / f"{name}.log", "w"),  # noqa: SIM115
            stderr=subprocess.STDOUT,
        )  # fmt: skip
        for name, store, extra in (
            (
                "master",
                mdir,
                [
                    "--ha-listen",
                    ha,
                    "--ha-tls-cert",
                    str(cert),
                    "--ha-tls-key",
                    str(key),
                ],
            ),
            (
                "slave",
                sdir,
                [
                    "--broker-id",
                    "1",
                    "--master-ha",
                    ha,
                    "--ha-tls-ca",
                    str(cert),
                    "--ha-tls-server-name",
                    "ha.broker-a.test",
                ],
            ),
        )  # fmt: skip
    ]
    try:
        wait_for(lambda: read_commit_pos(sdir) == end, 60, "the slave node")

        def ha_status() -> dict | None:
            done = subprocess.run(
                [sys.executable, "-m", "broker_core", "ha-status", str(sdir)],
                cwd=ROOT, capture_output=True, text=True, timeout=30,
            )  # fmt: skip
            return json.loads(done.stdout)["status"]

        # A serve slave's status, as ``replicate`` writes it (was null).
        status = wait_for(ha_status, 10, "the slave's ha/status.json")
        assert status["following"] and status["master"] == ha, status
    finally:
        for p in procs:
            _stop(p)
        registry = RouteRegistry(REGISTRY, cluster, 10.0)
        for k in registry.redis.scan_iter(f"{registry.prefix}:*"):
            registry.redis.delete(k)
    m, s = Broker.open(mdir, **SETTINGS), Broker.open(sdir, **SETTINGS)
    try:
        assert assert_same_store(m, s) == 300
    finally:
        s.close()
        m.close()
    assert "over TLS" in (tmp_path / "master.log").read_text()
