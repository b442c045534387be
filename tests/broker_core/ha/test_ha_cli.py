"""``python -m broker_core replicate|promote|ha-status`` as an operator uses them."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

from _hahelpers import (
    ROOT,
    SETTINGS,
    free_port,
    secret_file,
    slave_status,
    start_master,
    start_replicate,
    wait_for,
)

from broker_core import Broker, Message
from broker_core.ha import read_role
from broker_core.shared import read_commit_pos


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "broker_core", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_promote_stops_a_running_replicate_and_leaves_a_writable_store(
    tmp_path: Path,
) -> None:
    mdir, sdir = tmp_path / "master", tmp_path / "slave"
    addr = f"127.0.0.1:{free_port()}"
    secret = secret_file(tmp_path)
    master = start_master(mdir, addr, secret, tmp_path / "acts", count=2000)
    slave = start_replicate(sdir, addr, secret)
    try:
        assert master.stdout is not None and master.stdout.readline().startswith("DONE")
        end = read_commit_pos(mdir)
        wait_for(
            lambda: slave_status(sdir).get("replicated_offset") == end, 30, "catch-up"
        )
        st = json.loads(_cli("ha-status", str(sdir)).stdout)
        assert st["role"]["role"] == "SLAVE" and st["role"]["master"] == addr
        assert st["status"]["connected"] and st["status"]["lag_bytes"] == 0
        done = _cli("promote", str(sdir), "--role", "SYNC_MASTER")
        assert done.returncode == 0, done.stdout + done.stderr
        # The follower saw the role change and stopped: the process exits.
        assert slave.wait(timeout=20) == 0
        assert slave_status(sdir)["following"] is False
    finally:
        master.send_signal(signal.SIGTERM)
        master.wait(timeout=30)
        if slave.poll() is None:
            slave.kill()
            slave.wait()
    assert read_role(sdir)["role"] == "SYNC_MASTER"
    with Broker.open(sdir, **SETTINGS) as b:
        assert b.store.max_physical_offset() == end
        r = b.send(Message("HA-A", b"on the new master"))
        assert r.commit_log_offset == end
