"""The node's admin API over real HTTP against a running endpoint process:
the token is required, halves are listed and decided by an operator's name,
conflicts and unknown ids get their status codes."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from broker_core import Broker, Message
from broker_core.transaction import TransactionService

pytestmark = [pytest.mark.services]

ROOT = Path(__file__).resolve().parents[3]
TOKEN = "admin-test-token"


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def call(base, method, path, body=None, token=TOKEN):
    req = urllib.request.Request(
        base + path,
        method=method,
        data=json.dumps(body).encode() if body is not None else None,
        headers={"Authorization": f"Bearer {token}"} if token else {},
    )
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


@pytest.fixture
def node(tmp_path):
    store = tmp_path / "store"
    with Broker.open(str(store)) as b:
        tx = TransactionService(b)
        ids = [
            tx.send_half(
                "PID_shop", Message("orders", b"x", keys=f"o{i}")
            ).transaction_id
            for i in range(3)
        ]
        tx.close()
    (tmp_path / "token").write_text(TOKEN + "\n")
    grpc, admin = _port(), _port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "broker_core", "serve", "--store", str(store),
         "--listen", f"127.0.0.1:{grpc}", "--admin-listen", f"127.0.0.1:{admin}",
         "--admin-token-file", str(tmp_path / "token"), "--no-redis-relay"],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    base = f"http://127.0.0.1:{admin}"
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", admin), timeout=1).close()
            break
        except OSError:
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.1)
    yield base, ids
    proc.terminate()
    proc.wait(timeout=20)


def test_admin_api_lists_and_decides_halves(node):
    base, ids = node
    assert call(base, "GET", "/v1/halves", token=None)[0] == 401
    assert call(base, "GET", "/v1/halves", token="wrong")[0] == 401
    code, page = call(base, "GET", "/v1/halves?state=PENDING")
    assert code == 200
    assert sorted(h["transaction_id"] for h in page["items"]) == sorted(ids)
    assert {h["keys"] for h in page["items"]} == {"o0", "o1", "o2"}

    code, out = call(base, "POST", f"/v1/halves/{ids[0]}/rollback", {"operator": "al"})
    assert code == 200, out
    code, out = call(base, "POST", f"/v1/halves/{ids[1]}/commit", {"operator": "al"})
    assert code == 200, out
    code, out = call(base, "POST", f"/v1/halves/{ids[0]}/commit", {"operator": "al"})
    assert code == 409, out  # rolled back already
    assert call(base, "POST", f"/v1/halves/{ids[2]}/commit", {})[0] == 400
    assert call(base, "POST", "/v1/halves/ABCDEF/commit", {"operator": "al"})[0] == 404
    assert call(base, "POST", "/v1/halves/zz!/commit", {"operator": "al"})[0] == 404

    _, pending = call(base, "GET", "/v1/halves?state=PENDING")
    assert [h["transaction_id"] for h in pending["items"]] == [ids[2]]
    _, done = call(base, "GET", "/v1/halves?state=ROLLED_BACK")
    assert [(h["transaction_id"], h["operator"]) for h in done["items"]] == [
        (ids[0], "al")
    ]
    code, node_info = call(base, "GET", "/v1/node")
    assert code == 200 and node_info["role"] == "ASYNC_MASTER"
    code, topics = call(base, "GET", "/v1/topics")
    assert code == 200 and "orders" in {t["topic"] for t in topics["topics"]}


def test_admin_api_creates_topics(node):
    base, _ = node
    body = {"topic": "payments", "read_queues": 2, "write_queues": 2}
    assert call(base, "POST", "/v1/topics", body) == (
        200,
        {**{k: body[k] for k in body}, "result": "created"},
    )
    code, out = call(base, "POST", "/v1/topics", {**body, "read_queues": 3,
                                                   "write_queues": 3})  # fmt: skip
    assert code == 200 and out["result"] == "updated"
    _, topics = call(base, "GET", "/v1/topics")
    got = {t["topic"]: t["read_queues"] for t in topics["topics"]}
    assert got["payments"] == 3
    assert call(base, "POST", "/v1/topics", {"topic": "bad topic!"})[0] == 400
    assert call(base, "POST", "/v1/topics", {"topic": "t", "read_queues": 0})[0] == 400
    assert (
        call(base, "POST", "/v1/topics", {"topic": "t", "read_queues": "x"})[0] == 400
    )
