"""The transaction check task through real Celery workers on real Redis: two runs
asked for at once, one does the work and the other reports BUSY."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import redis

from broker_core import Broker, Message, TransactionState
from broker_core.transaction import TransactionService, verify_signature
from tests.support import redis_db

ROOT = Path(__file__).resolve().parents[3]
SECRET = "worker-test-secret"


class _Slow(BaseHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        ok = verify_signature(
            SECRET,
            self.headers["X-Broker-Timestamp"],
            body,
            self.headers["X-Broker-Signature"],
        )
        time.sleep(3.0)  # keeps the first run busy while the second starts
        reply = json.dumps({"resolution": "COMMIT" if ok else "ROLLBACK"}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)


@pytest.mark.services
@pytest.mark.slow
def test_two_workers_one_run_at_a_time(tmp_path: Path) -> None:
    redis_url = redis_db(13)
    client = redis.Redis.from_url(redis_url)
    client.flushdb()
    store = tmp_path / "store"
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Slow)
    threading.Thread(target=srv.serve_forever, args=(0.05,), daemon=True).start()
    with Broker.open(store) as b, TransactionService(b) as svc:
        svc.checkers.configure(
            "PID_w",
            "webhook",
            url=f"http://127.0.0.1:{srv.server_address[1]}/check",
            secret=SECRET,
        )
        ids = [
            svc.send_half(
                "PID_w",
                Message(
                    "orders", b"x", properties={"CHECK_IMMUNITY_TIME_IN_SECONDS": "0"}
                ),
            ).transaction_id
            for _ in range(3)
        ]
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "console.settings",
        "VAR_DIR": str(tmp_path),
        "BROKER_STORE_DIR": str(store),
        "DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}",
        "REDIS_URL": redis_url,
        "TRANSACTION_CHECK_INTERVAL": "20",
        "PYTHONUNBUFFERED": "1",
    }
    celery = [sys.executable, "-m", "celery", "-A", "console"]
    log = open(tmp_path / "worker.log", "w")
    workers = [
        subprocess.Popen(
            [*celery, "worker", "--pool", "solo", "-n", f"tx{i}@%h", "-Q", "celery"],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        for i in range(2)
    ]
    try:
        from celery import Celery

        app = Celery(broker=redis_url, backend=redis_url)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if len(app.control.ping(timeout=0.5) or []) == 2:
                break
        assert len(app.control.ping(timeout=1) or []) == 2, (
            tmp_path / "worker.log"
        ).read_text()
        results = [app.send_task("transactions.run_check") for _ in range(2)]
        summaries = [r.get(timeout=60) for r in results]
        statuses = sorted(s["status"] for s in summaries)
        assert statuses == ["BUSY", "COMPLETED"], summaries
        done = next(s for s in summaries if s["status"] == "COMPLETED")
        assert done["checks_sent"] == 3 and done["answers"] == {"COMMIT": 3}
    finally:
        for w in workers:
            w.terminate()
        for w in workers:
            try:
                w.wait(timeout=20)
            except subprocess.TimeoutExpired:
                w.kill()
        log.close()
        srv.shutdown()
        client.flushdb()
    with Broker.open(store) as b, TransactionService(b) as svc:
        assert [svc.state(t) for t in ids] == [TransactionState.COMMITTED] * 3
