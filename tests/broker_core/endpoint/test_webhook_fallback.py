"""A check-back with no live producer falls back to the group's webhook."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from tests.endpoint_server import result, spawn, start_server, stop_server
from tests.support import free_port

pytestmark = [pytest.mark.protocol, pytest.mark.slow]


def test_webhook_used_when_no_producer_is_live(tmp_path):
    from broker_core import Broker
    from broker_core.transaction import TransactionService

    calls = []

    class H(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802
            body = self.rfile.read(int(self.headers["Content-Length"]))
            calls.append(json.loads(body)["topic"])
            out = b'{"resolution": "COMMIT"}'
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

        def log_message(self, *a):
            pass

    http = HTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=http.serve_forever, daemon=True).start()
    store = tmp_path / "store"
    with Broker.open(store) as b, TransactionService(b) as tx:
        tx.checkers.configure(
            "TWw", "webhook", url=f"http://127.0.0.1:{http.server_port}/", secret="s"
        )
    port = free_port()
    proc = start_server(store, port, tmp_path / "server.log")
    try:
        ep = f"127.0.0.1:{port}"
        half = result(spawn("half_only", ep, "w", tmp_path))
        got = result(spawn("consume_one", ep, "w", tmp_path))
    finally:
        assert stop_server(proc) == 0
        http.shutdown()
    assert half["tx"]
    assert got["got"] == ["via-webhook"]
    assert calls and calls[0] == "TWw"


def test_check_backs_never_reach_an_unrelated_producer(tmp_path):
    store = tmp_path / "store"
    port = free_port()
    proc = start_server(store, port, tmp_path / "server.log")
    try:
        r = result(spawn("unrelated_checker", f"127.0.0.1:{port}", "u", tmp_path))
    finally:
        assert stop_server(proc) == 0
    assert r == {"asked_unrelated": []}
    from broker_core import Broker
    from broker_core.transaction import TransactionService

    with Broker.open(store) as b, TransactionService(b) as tx:
        # The orphan was checked (and found no producer of its topic), not
        # resolved; those checks reached nobody, so none of them counted.
        (half,) = tx.list_halves(topic="TXAu").items
        checks = [e for e in tx.get_half(half.transaction_id).history]
        assert checks and all(e.kind == "CHECK" for e in checks)
        assert all("no producer online" in (e.detail or "") for e in checks)
        assert half.check_count == 0
