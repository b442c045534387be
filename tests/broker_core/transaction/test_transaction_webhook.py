"""Webhook check-backs against a real local HTTP server: signatures, payload,
answers, malformed replies, errors and timeouts."""

from __future__ import annotations

import base64
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from _txhelpers import order

from broker_core.transaction import (
    TransactionState,
    sign,
    verify_signature,
)
from broker_core.transaction.transports import SIGNATURE_HEADER, TIMESTAMP_HEADER

SECRET = "s3cret-for-pg"


class Checker(ThreadingHTTPServer):
    """A producer's checker: verifies the signature, answers per URL path."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.seen: list[dict] = []
        self.lock = threading.Lock()

    def handle_error(self, request, client_address) -> None:
        pass  # the timed-out client has gone: nothing to report

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args) -> None:  # keep test output quiet
        pass

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        ok = verify_signature(
            SECRET, self.headers[TIMESTAMP_HEADER], body, self.headers[SIGNATURE_HEADER]
        )
        server: Checker = self.server  # type: ignore[assignment]
        with server.lock:
            server.seen.append(
                {"path": self.path, "valid": ok, "json": json.loads(body)}
            )
        if not ok:
            return self._reply(401, b'{"error": "bad signature"}')
        mode = self.path.strip("/")
        replies = {
            "commit": (200, b'{"resolution": "COMMIT"}'),
            "rollback": (200, b'{"resolution": "rollback"}'),
            "unknown": (200, b'{"resolution": "UNKNOWN"}'),
            "not-json": (200, b"COMMIT please"),
            "no-key": (200, b'{"state": "COMMIT"}'),
            "bad-value": (200, b'{"resolution": "MAYBE"}'),
            "bad-type": (200, b'{"resolution": 8}'),
            "array": (200, b'["COMMIT"]'),
            "error": (500, b'{"resolution": "COMMIT"}'),
        }
        if mode == "slow":
            time.sleep(2)
            return self._reply(200, b'{"resolution": "COMMIT"}')
        self._reply(*replies[mode])

    def _reply(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def checker() -> Iterator[Checker]:
    srv = Checker()
    t = threading.Thread(target=srv.serve_forever, args=(0.05,), daemon=True)
    t.start()
    yield srv
    srv.shutdown()
    srv.server_close()


def test_signature_helpers():
    ts = str(int(time.time() * 1000))
    sig = sign(SECRET, ts, b"{}")
    assert sig.startswith("sha256=") and len(sig) == 7 + 64
    assert verify_signature(SECRET, ts, b"{}", sig)
    assert not verify_signature("other", ts, b"{}", sig)
    assert not verify_signature(SECRET, ts, b"{ }", sig)
    assert not verify_signature(SECRET, str(int(ts) - 3600_000), b"{}", sig)
    assert not verify_signature(SECRET, "yesterday", b"{}", sig)


def test_signed_webhook_commit_with_full_payload(svc, checker, broker):
    svc.checkers.configure("pg", "webhook", url=checker.base + "/commit", secret=SECRET)
    r = svc.send_half("pg", order(1, properties={"color": "red"}))
    res = svc.run_check()
    assert res.answers == {"COMMIT": 1}
    assert svc.state(r.transaction_id) is TransactionState.COMMITTED
    (call,) = checker.seen
    assert call["valid"]
    p = call["json"]
    assert p["transaction_id"] == r.transaction_id and p["msg_id"] == r.msg_id
    assert p["producer_group"] == "pg" and p["topic"] == "Orders"
    assert p["keys"] == "o-1" and p["tags"] == "paid" and p["check_no"] == 1
    assert p["properties"]["color"] == "red"
    assert base64.b64decode(p["body"]) == b"order-1"
    ev = svc.get_half(r.transaction_id).history[0]
    assert (ev.transport, ev.target, ev.answer) == (
        "webhook",
        checker.base + "/commit",
        "COMMIT",
    )
    # The secret is masked when the configuration is listed.
    assert svc.checkers.configured()["pg"]["secret"] == "***"


def test_webhook_rollback_and_unknown(svc, checker):
    svc.checkers.configure(
        "rb", "webhook", url=checker.base + "/rollback", secret=SECRET
    )
    svc.checkers.configure(
        "un", "webhook", url=checker.base + "/unknown", secret=SECRET
    )
    a = svc.send_half("rb", order(1))
    b = svc.send_half("un", order(2))
    svc.run_check()
    assert svc.state(a.transaction_id) is TransactionState.ROLLED_BACK
    info = svc.get_half(b.transaction_id).info
    assert info.state is TransactionState.PENDING and info.check_count == 1


@pytest.mark.parametrize(
    ("path", "detail"),
    [
        ("not-json", "not JSON"),
        ("no-key", "no 'resolution'"),
        ("bad-value", "invalid check answer"),
        ("bad-type", "not a string"),
        ("array", "no 'resolution'"),
        ("error", "HTTP 500"),
    ],
)
def test_malformed_or_failed_answers_count_as_failed_checks(svc, checker, path, detail):
    svc.checkers.configure("pg", "webhook", url=f"{checker.base}/{path}", secret=SECRET)
    r = svc.send_half("pg", order(1))
    assert svc.run_check().answers == {"FAILED": 1}
    d = svc.get_half(r.transaction_id)
    assert d.info.state is TransactionState.PENDING and d.info.check_count == 1
    assert d.history[0].answer == "FAILED" and detail in d.history[0].detail
    assert svc.metrics().checks_failed == 1


def test_wrong_secret_is_rejected_by_the_receiver(svc, checker):
    svc.checkers.configure(
        "pg", "webhook", url=checker.base + "/commit", secret="wrong"
    )
    r = svc.send_half("pg", order(1))
    assert svc.run_check().answers == {"FAILED": 1}
    assert checker.seen[0]["valid"] is False
    assert "HTTP 401" in svc.get_half(r.transaction_id).history[0].detail


def test_timeout_and_unreachable(svc, checker):
    svc.checkers.configure(
        "slow", "webhook", url=checker.base + "/slow", secret=SECRET, timeout_s=0.3
    )
    svc.checkers.configure("gone", "webhook", url="http://127.0.0.1:9/x", secret=SECRET)
    a = svc.send_half("slow", order(1))
    b = svc.send_half("gone", order(2))
    res = svc.run_check()
    assert res.answers == {"FAILED": 2}
    ev = svc.get_half(a.transaction_id).history[0]
    assert "timed out" in ev.detail and ev.latency_ms < 1500
    assert "request failed" in svc.get_half(b.transaction_id).history[0].detail


def test_configuration_is_shared_through_the_store(svc, broker, checker):
    from broker_core.transaction import TransactionService

    svc.checkers.configure("pg", "webhook", url=checker.base + "/commit", secret=SECRET)
    # Another service instance (another process in production) sees it.
    other = TransactionService(broker, transaction_timeout_ms=0)
    try:
        assert other.checkers.for_group("pg").target == checker.base + "/commit"
        svc.checkers.remove("pg")
        assert other.checkers.for_group("pg") is None
    finally:
        other.close()
    with pytest.raises(ValueError):
        svc.checkers.configure("pg", "carrier-pigeon")
    with pytest.raises(ValueError):
        svc.checkers.configure("pg", "webhook", url="ftp://x", secret="s")


def test_a_damaged_checkers_file_uses_its_backup_or_says_so(svc, broker):
    """``transaction/checkers.json`` with a flipped byte: its backup is read,
    verify reports it and verify --repair writes it back; with the backup
    damaged too, a clear ConfigFileError naming the file (it was a raw
    UnicodeDecodeError, and verify said OK)."""
    from broker_core.errors import ConfigFileError
    from broker_core.transaction.transports import CheckerRegistry, read_checkers
    from broker_core.verify import verify_store

    svc.checkers.configure("pg", "webhook", url="http://127.0.0.1:9/x", secret=SECRET)
    path = broker.store.root / "transaction" / "checkers.json"
    data = bytearray(path.read_bytes())
    data[3] = 0xFF
    path.write_bytes(bytes(data))
    assert read_checkers(path)["pg"]["url"] == "http://127.0.0.1:9/x"
    assert CheckerRegistry(path).configured()["pg"]["secret"] == "***"
    assert any(
        "checkers.json is damaged" in p
        for p in verify_store(broker.store.root).problems
    )
    bak = path.with_name(path.name + ".bak")
    bak.write_bytes(b"")
    with pytest.raises(ConfigFileError, match="checkers.json is damaged"):
        read_checkers(path)
    assert any("checkers.json" in p for p in verify_store(broker.store.root).problems)
