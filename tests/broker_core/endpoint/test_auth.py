"""Optional authentication: the client's MQv2-HMAC-SHA1 signature."""

from __future__ import annotations

import os
import subprocess

import pytest

from tests.endpoint_server import PY, ROOT, result, spawn, stop_server, wait_port
from tests.support import free_port

pytestmark = [pytest.mark.protocol, pytest.mark.slow]


def run(name, ep, suffix, home, ak, sk):
    old = {k: os.environ.get(k) for k in ("MQ_AK", "MQ_SK")}
    os.environ["MQ_AK"], os.environ["MQ_SK"] = ak, sk
    try:
        return spawn(name, ep, suffix, home)
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def test_hmac_authentication(tmp_path):
    port = free_port()
    proc = subprocess.Popen(
        [
            PY,
            "-m",
            "broker_core",
            "serve",
            "--store",
            str(tmp_path / "store"),
            "--listen",
            f"127.0.0.1:{port}",
            "--no-redis-relay",
            "--auth",
            "ak1:sk1",
        ],
        cwd=ROOT,
        stdout=open(tmp_path / "server.log", "w"),
        stderr=subprocess.STDOUT,
    )
    try:
        wait_port(proc, port)
        ep = f"127.0.0.1:{port}"
        good = run("auth", ep, "ok", tmp_path, "ak1", "sk1")
        bad = run("auth", ep, "bad", tmp_path, "ak1", "wrong")
        anon = run("auth", ep, "anon", tmp_path, "", "")
        replay = run("replay", ep, "rp", tmp_path, "", "")
        good, bad, anon = result(good), result(bad), result(anon)
        replay = result(replay)
    finally:
        assert stop_server(proc) == 0
    assert good == {"sent": True, "err": None, "got": ["secret"]}
    assert not bad["sent"] and not anon["sent"]
    # A valid signature over an old (or meaningless) date is a replay.
    assert replay == {
        "fresh": "OK",  # a route (topics are created on first use)
        "old": "UNAUTHORIZED",
        "ten_minutes_ago": "UNAUTHORIZED",
        "garbage": "UNAUTHORIZED",
    }
    log = (tmp_path / "server.log").read_text()
    assert "--auth without --tls-listen" in log
