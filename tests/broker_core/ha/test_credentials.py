"""``python -m broker_core credentials``: the secrets and certificates of the
three-host guide, made by the command and used as the guide uses them (the HA
link with the CA, not the host's own certificate, as the slave's trust)."""

from __future__ import annotations

import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from _hahelpers import ROOT, SECRET, SETTINGS, assert_same_store, wait_for

from broker_core import Broker, Message
from broker_core.ha import SlaveFollower, start_ha_server
from broker_core.ha.tls import client_context, server_context


def credentials(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "broker_core", "credentials", *args],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def test_the_command_makes_every_secret_once_and_adds_hosts_later(
    tmp_path: Path,
) -> None:
    d = tmp_path / "creds"
    first = credentials(str(d), "--cluster", "c1", "--host", "a0=127.0.0.1,a0.test")
    assert first.returncode == 0, first.stderr
    secret_files = ["admin.token", "ha.secret", "redis.password", "ca-key.pem",
                    "hosts/a0/key.pem"]  # fmt: skip
    for rel in secret_files:
        mode = stat.S_IMODE((d / rel).stat().st_mode)
        assert mode == 0o600, (rel, oct(mode))
    assert stat.S_IMODE(d.stat().st_mode) == 0o700
    assert len((d / "admin.token").read_text().strip()) >= 40
    before = {p: (d / p).read_bytes() for p in ["admin.token", "ha.secret", "ca.pem",
                                                "hosts/a0/cert.pem"]}  # fmt: skip

    # Again, with a new host: nothing replaced, the new host signed by the same CA.
    again = credentials(str(d), "--host", "a0=127.0.0.1", "--host", "b0=10.0.0.12")
    assert again.returncode == 0, again.stderr
    assert {p: (d / p).read_bytes() for p in before} == before
    assert "wrote" in again.stdout and "hosts/b0" in again.stdout
    if shutil.which("openssl"):
        for host in ("a0", "b0"):
            ok = subprocess.run(
                ["openssl", "verify", "-CAfile", str(d / "ca.pem"),
                 str(d / "hosts" / host / "cert.pem")],
                capture_output=True, text=True,
            )  # fmt: skip
            assert ok.returncode == 0, ok.stdout + ok.stderr
        sans = subprocess.run(
            ["openssl", "x509", "-in", str(d / "hosts/a0/cert.pem"), "-noout",
             "-ext", "subjectAltName"], capture_output=True, text=True,
        ).stdout  # fmt: skip
        assert "IP Address:127.0.0.1" in sans and "DNS:a0.test" in sans, sans

    # --renew issues that host's certificate again, and only that.
    renew = credentials(str(d), "--host", "a0=127.0.0.1", "--renew", "a0")
    assert renew.returncode == 0, renew.stderr
    assert (d / "hosts/a0/cert.pem").read_bytes() != before["hosts/a0/cert.pem"]
    assert (d / "ca.pem").read_bytes() == before["ca.pem"]

    bad = credentials(str(d), "--host", "no-address")
    assert bad.returncode == 2 and "NAME=ADDR" in bad.stderr
    half = tmp_path / "half"
    half.mkdir()
    (half / "ca.pem").write_bytes(before["ca.pem"])
    refused = credentials(str(half), "--host", "a0=127.0.0.1")
    assert refused.returncode == 2 and "ca-key.pem" in refused.stderr


def test_a_slave_trusting_the_ca_replicates_and_another_clusters_ca_is_refused(
    tmp_path: Path,
) -> None:
    mine, theirs = tmp_path / "mine", tmp_path / "theirs"
    for d in (mine, theirs):
        done = credentials(str(d), "--host", "m=127.0.0.1")
        assert done.returncode == 0, done.stderr
    host = mine / "hosts" / "m"
    with (
        Broker.open(tmp_path / "master", **SETTINGS) as master,
        Broker.open(tmp_path / "slave", **SETTINGS) as slave,
    ):
        master.send_batch([Message("T", b"c-%d" % i) for i in range(150)])
        srv = start_ha_server(
            master.store, "127.0.0.1:0", SECRET,
            tls=server_context(str(host / "cert.pem"), str(host / "key.pem")),
        )  # fmt: skip
        try:
            stranger = SlaveFollower(
                slave.store, srv.address, SECRET,
                tls=client_context(str(theirs / "ca.pem")),
            ).start()  # fmt: skip
            try:
                error = wait_for(
                    lambda: stranger.status()["last_error"], 15, "a refusal"
                )
                assert "failed verification" in str(error), error
                assert slave.store.max_physical_offset() == 0
            finally:
                stranger.stop()
            f = SlaveFollower(
                slave.store, srv.address, SECRET,
                tls=client_context(str(mine / "ca.pem")),
            ).start()  # fmt: skip
            try:
                end = master.store.max_physical_offset()
                wait_for(
                    lambda: slave.store.max_physical_offset() == end, 20, "replication"
                )
                assert f.status()["tls"] and f.status()["last_error"] is None
            finally:
                f.stop()
        finally:
            srv.stop()
        assert assert_same_store(master, slave) == 150


@pytest.mark.protocol
def test_the_grpc_endpoint_serves_tls_with_the_hosts_certificate(
    tmp_path: Path,
) -> None:
    """``serve --tls-cert/--tls-key`` with the host's certificate: a client
    trusting the CA completes a call; one trusting another CA is refused."""
    import grpc
    from rocketmq.grpc_protocol import definition_pb2 as pb
    from rocketmq.grpc_protocol import service_pb2 as spb
    from rocketmq.grpc_protocol import service_pb2_grpc as sgrpc

    from tests.endpoint_server import stop_server, wait_port
    from tests.support import free_port

    mine, theirs = tmp_path / "mine", tmp_path / "theirs"
    for d in (mine, theirs):
        assert credentials(str(d), "--host", "m=127.0.0.1").returncode == 0
    host = mine / "hosts" / "m"
    port, tls_port = free_port(), free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "broker_core", "serve", "--store",
         str(tmp_path / "store"), "--listen", f"127.0.0.1:{port}",
         "--no-redis-relay", "--tls-listen", f"127.0.0.1:{tls_port}",
         "--tls-cert", str(host / "cert.pem"), "--tls-key", str(host / "key.pem")],
        cwd=ROOT, stdout=open(tmp_path / "server.log", "w"),  # noqa: SIM115
        stderr=subprocess.STDOUT,
    )  # fmt: skip

    def route(ca: Path) -> spb.QueryRouteResponse:
        creds = grpc.ssl_channel_credentials(root_certificates=ca.read_bytes())
        with grpc.secure_channel(f"127.0.0.1:{tls_port}", creds) as ch:
            stub = sgrpc.MessagingServiceStub(ch)
            return stub.QueryRoute(
                spb.QueryRouteRequest(topic=pb.Resource(name="TlsTopic")),
                timeout=10,
            )

    try:
        wait_port(proc, tls_port)
        answer = route(mine / "ca.pem")
        assert answer.status.code == pb.OK, answer  # topics are made on demand
        with pytest.raises(grpc.RpcError) as refused:
            route(theirs / "ca.pem")
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
    finally:
        assert stop_server(proc) == 0


def test_runs_at_once_on_one_directory_make_one_ca_that_signed_every_host(
    tmp_path: Path,
) -> None:
    """Six runs started together, each adding its own host: they take turns
    (a lock), so there is one CA, its key is its certificate's, every host's
    certificate is issued by it and no temporary file is left behind."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    d = tmp_path / "creds"
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "broker_core",
                "credentials",
                str(d),
                "--host",
                f"h{i}=10.0.0.{i + 1}",
            ],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        for i in range(6)
    ]
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    ca = x509.load_pem_x509_certificate((d / "ca.pem").read_bytes())
    key = serialization.load_pem_private_key((d / "ca-key.pem").read_bytes(), None)
    der, spki = (
        serialization.Encoding.DER,
        serialization.PublicFormat.SubjectPublicKeyInfo,
    )
    assert ca.public_key().public_bytes(der, spki) == key.public_key().public_bytes(
        der, spki
    )
    for i in range(6):
        cert = x509.load_pem_x509_certificate((d / f"hosts/h{i}/cert.pem").read_bytes())
        cert.verify_directly_issued_by(ca)
    assert not [p.name for p in d.rglob("*.tmp")]


def test_what_it_keeps_it_checks_first(tmp_path: Path) -> None:
    d = tmp_path / "creds"
    assert credentials(str(d), "--host", "a0=127.0.0.1").returncode == 0

    # A secret readable by others is tightened, and said so.
    (d / "ha.secret").chmod(0o644)
    run = credentials(str(d), "--host", "a0=127.0.0.1")
    assert run.returncode == 0, run.stderr
    assert stat.S_IMODE((d / "ha.secret").stat().st_mode) == 0o600
    assert "ha.secret: was readable by others, now 0600" in run.stdout

    # A secret replaced by a link (to a file an attacker reads) is refused:
    # neither kept nor written through.
    elsewhere = tmp_path / "stolen"
    (d / "admin.token").unlink()
    (d / "admin.token").symlink_to(elsewhere)
    run = credentials(str(d), "--host", "a0=127.0.0.1")
    assert run.returncode == 2 and "symbolic link" in run.stderr, run.stderr
    assert not elsewhere.exists()
    (d / "admin.token").unlink()

    # A CA key that is no key, then another CA's key: refused, no traceback.
    good_key = (d / "ca-key.pem").read_bytes()
    (d / "ca-key.pem").write_bytes(b"-----BEGIN PRIVATE KEY-----\ngarbage\n")
    run = credentials(str(d), "--host", "a0=127.0.0.1")
    assert run.returncode == 2 and "not a readable PEM private key" in run.stderr
    assert "Traceback" not in run.stderr
    other = tmp_path / "other"
    assert credentials(str(other), "--host", "a0=127.0.0.1").returncode == 0
    (d / "ca-key.pem").write_bytes((other / "ca-key.pem").read_bytes())
    run = credentials(str(d), "--host", "a0=127.0.0.1")
    assert run.returncode == 2 and "do not belong together" in run.stderr, run.stderr
    (d / "ca-key.pem").write_bytes(good_key)

    # A host certificate from another CA: refused until renewed.
    for f in ("cert.pem", "key.pem"):
        (d / "hosts/a0" / f).write_bytes((other / "hosts/a0" / f).read_bytes())
    run = credentials(str(d), "--host", "a0=127.0.0.1")
    assert run.returncode == 2 and "--renew a0" in run.stderr, run.stderr
    run = credentials(str(d), "--host", "a0=127.0.0.1", "--renew", "a0")
    assert run.returncode == 0, run.stderr
    assert credentials(str(d), "--host", "a0=127.0.0.1").returncode == 0


@pytest.mark.parametrize(
    "args",
    [
        ["--host", "a0=a..b"],
        ["--host", "a0=1.2.3.999"],
        ["--host", "a0=*"],
        ["--host", "a0=*.com"],
        ["--host", "a0=fe80::1%eth0"],
        ["--host", "a0=" + "x" * 64 + ".test"],
        ["--host", "a0=bad\nname"],
        ["--host", "a0\n=127.0.0.1"],
        ["--host", "a0=127.0.0.1", "--cluster", "c" * 51],
        ["--host", "a0=127.0.0.1", "--hots", "b0=10.0.0.2"],
    ],
)
def test_bad_input_is_refused_with_its_reason(tmp_path: Path, args: list[str]) -> None:
    run = credentials(str(tmp_path / "creds"), *args)
    assert run.returncode == 2, run.stdout
    assert run.stderr.strip() and "Traceback" not in run.stderr, run.stderr
    assert not (tmp_path / "creds" / "ca.pem").exists()
