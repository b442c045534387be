"""The official Node.js client (npm ``rocketmq-client-nodejs``, installed under
``var/node`` by ``make test``'s set-up) against the endpoint: the scenarios the
Python client passes, with the same expectations."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from tests.endpoint_server import ROOT, start_server, stop_server
from tests.support import free_port

pytestmark = [pytest.mark.protocol, pytest.mark.slow]

SCENARIOS = Path(__file__).with_name("node_scenarios.js")
MODULES = Path(ROOT) / "var" / "node" / "node_modules"


def _run(name: str, endpoint: str, suffix: str) -> dict:
    proc = subprocess.run(
        ["node", str(SCENARIOS), name, endpoint, suffix],
        env=dict(os.environ, NODE_PATH=str(MODULES)),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert lines, f"node scenario {name} failed:\n{proc.stdout[-3000:]}{proc.stderr}"
    return json.loads(lines[-1][7:])


@pytest.fixture(scope="module")
def endpoint(tmp_path_factory):
    if shutil.which("node") is None:
        pytest.skip("node is not installed (make test's set-up installs it)")
    if not (MODULES / "rocketmq-client-nodejs").is_dir():
        pytest.skip("rocketmq-client-nodejs is not installed: run make node-client")
    tmp = tmp_path_factory.mktemp("node")
    port = free_port()
    proc = start_server(tmp / "store", port, tmp / "server.log")
    yield f"127.0.0.1:{port}"
    assert stop_server(proc) == 0


def test_send_with_tag_keys_properties_then_receive_and_ack(endpoint):
    r = _run("normal", endpoint, "n")
    (got,) = r["got"]
    # The message arrives intact (the client verifies the MD5 body digest) and
    # keeps the id the client gave it.
    assert got == {
        "id": r["sent"],
        "tag": "tagA",
        "keys": ["k1", "k2"],
        "body": "hello",
        "props": {"region": "eu"},
        "group": None,
    }


def test_delay(endpoint):
    r = _run("delay", endpoint, "d")
    assert r == {"got": ["later"], "waited_at_least_2s": True}


def test_fifo_keeps_order_within_a_group(endpoint):
    r = _run("fifo", endpoint, "f")
    assert r == {"got": ["f0", "f1", "f2", "f3", "f4"], "group": "g1"}


def test_push_consumer_listener_gets_each_message_once(endpoint):
    assert _run("push", endpoint, "p") == {"seen": ["p0", "p1", "p2"]}


def test_a_failed_push_is_retried_after_the_groups_backoff(endpoint):
    """The Node.js client ignores a customized backoff and retries with an
    invisible time of 0: the broker holds a push consumer's retry for the
    group's backoff for a first attempt (the test server's: 300 ms; 1 s by
    default), as it promised in the settings. It was redelivered with the
    next pop: within milliseconds when other messages arrived meanwhile."""
    r = _run("push_retry", endpoint, "r")
    assert r["attempts"] == [1, 2]
    assert 290 <= r["gap_ms"] < 10_000, r


def test_transaction_commit_rollback_and_check_back(endpoint):
    r = _run("transaction", endpoint, "x")
    assert r == {"got": ["checked", "committed"], "checked": ["checked"]}


def test_a_producer_alive_across_an_endpoint_restart_gets_check_backs(tmp_path):
    """The Node.js client re-opens its Telemetry stream a second after it
    breaks and resends its settings: the restarted endpoint asks it again."""
    from broker_core import Broker
    from broker_core.transaction import TransactionService, TransactionState

    installed = (MODULES / "rocketmq-client-nodejs").is_dir()
    if shutil.which("node") is None or not installed:
        pytest.skip("the Node.js client is not installed (make node-client)")
    store, go = tmp_path / "store", tmp_path / "go"
    port = free_port()
    server = start_server(store, port, tmp_path / "a.log")
    node = subprocess.Popen(
        ["node", str(SCENARIOS), "restart_tx", f"127.0.0.1:{port}", "r"],
        env=dict(os.environ, NODE_PATH=str(MODULES), GO_FILE=str(go)),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert node.stdout is not None
        for line in node.stdout:
            if line.startswith(("READY", "ERROR")):
                break
        assert line.startswith("READY"), line
        time.sleep(3)  # asked at least once: "unknown"
        assert stop_server(server) == 0
        server = start_server(store, port, tmp_path / "b.log")  # same address
        go.touch()
        out, _ = node.communicate(timeout=120)
    finally:
        node.kill()
        stop_server(server)
    results = [ln for ln in out.splitlines() if ln.startswith("RESULT ")]
    assert results, out[-3000:]
    checks = json.loads(results[-1][7:])["checks"]
    assert checks[0] == "unknown" and checks[-1] == "commit"
    with Broker.open(store) as b, TransactionService(b) as tx:
        (half,) = tx.list_halves(state=None, topic="NRr").items
        assert tx.state(half.transaction_id) is TransactionState.COMMITTED
