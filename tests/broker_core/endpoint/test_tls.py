"""TLS port beside the plaintext one; the client trusts a private CA through
GRPC_DEFAULT_SSL_ROOTS_FILE_PATH (reference G11)."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from tests.endpoint_server import PY, ROOT, result, spawn, stop_server, wait_port
from tests.support import free_port

pytestmark = [pytest.mark.protocol, pytest.mark.slow]


def test_tls_port(tmp_path):
    if shutil.which("openssl") is None:
        pytest.skip("no openssl")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
         "-keyout", str(key), "-out", str(cert), "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True, capture_output=True,
    )  # fmt: skip
    port, tls_port = free_port(), free_port()
    proc = subprocess.Popen(
        [PY, "-m", "broker_core", "serve", "--store", str(tmp_path / "store"),
         "--listen", f"127.0.0.1:{port}", "--no-redis-relay",
         "--tls-listen", f"127.0.0.1:{tls_port}", "--tls-cert", str(cert),
         "--tls-key", str(key)],
        cwd=ROOT, stdout=open(tmp_path / "server.log", "w"), stderr=subprocess.STDOUT,
    )  # fmt: skip
    old = {k: os.environ.get(k) for k in ("MQ_TLS", "GRPC_DEFAULT_SSL_ROOTS_FILE_PATH")}
    try:
        wait_port(proc, tls_port)
        os.environ["MQ_TLS"] = "1"
        os.environ["GRPC_DEFAULT_SSL_ROOTS_FILE_PATH"] = str(cert)
        tls = spawn("auth", f"127.0.0.1:{tls_port}", "tls", tmp_path)
        for k in old:
            os.environ.pop(k, None)
        plain = spawn("auth", f"127.0.0.1:{port}", "plain", tmp_path)
        tls, plain = result(tls), result(plain)
    finally:
        for k, v in old.items():
            if v is not None:
                os.environ[k] = v
        assert stop_server(proc) == 0
    assert tls == {"sent": True, "err": None, "got": ["secret"]}
    assert plain == {"sent": True, "err": None, "got": ["secret"]}
