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


@pytest.fixture
def endpoint(tmp_path):
    """A store with its endpoint (not serving gRPC) and its admin API on a
    free port: what ``serve --admin-listen`` runs, in this process."""
    from broker_core.cluster.admin import AdminServer
    from broker_core.endpoint.config import EndpointConfig
    from broker_core.endpoint.server import Endpoint

    broker = Broker.open(str(tmp_path / "store"))
    ep = Endpoint(broker, EndpointConfig())
    admin = AdminServer(ep, "127.0.0.1:0", TOKEN).start()
    try:
        yield f"http://{admin.address}", ep
    finally:
        admin.stop()
        ep.close()
        broker.close()


def test_admin_api_consumer_lag(endpoint):
    base, ep = endpoint
    broker = ep.broker
    broker.create_topic("events", 2)
    broker.send_batch(
        [Message("events", b"e%d" % i, queue_id=i % 2) for i in range(40)]
    )
    # analytics reads 5 messages of queue 0 and all 20 of queue 1; billing
    # reads 12 of queue 1 only.
    for group, qid, count in (("analytics", 0, 5), ("analytics", 1, 20),
                              ("billing", 1, 12)):  # fmt: skip
        got = broker.pull(group, "events", qid, 0, max_messages=count)
        assert len(got.messages) == count
        broker.commit_offset(group, "events", qid, got.next_offset)

    assert call(base, "GET", "/v1/consumers", token=None)[0] == 401
    assert call(base, "GET", "/v1/consumers", token="wrong")[0] == 401
    code, out = call(base, "GET", "/v1/consumers")
    assert code == 200, out
    rows = {(q["group"], q["topic"], q["queue_id"]): q for q in out["queues"]}
    assert {k: (q["committed_offset"], q["max_offset"], q["lag"])
            for k, q in rows.items()} == {
        ("analytics", "events", 0): (5, 20, 15),
        ("analytics", "events", 1): (20, 20, 0),
        # billing never committed on queue 0: its whole depth is behind
        ("billing", "events", 0): (-1, 20, 20),
        ("billing", "events", 1): (12, 20, 8),
    }  # fmt: skip

    # Consuming more shows at once; so does a send.
    broker.commit_offset("analytics", "events", 0, 20)
    broker.send(Message("events", b"late", queue_id=1))
    _, out = call(base, "GET", "/v1/consumers")
    lag = {(q["group"], q["queue_id"]): q["lag"] for q in out["queues"]}
    assert lag == {("analytics", 0): 0, ("analytics", 1): 1, ("billing", 0): 20,
                   ("billing", 1): 9}  # fmt: skip


def test_admin_api_delays(endpoint):
    import time

    base, ep = endpoint
    delays = ep.delays
    now = int(time.time() * 1000)
    for i in range(2):
        delays.send_delayed(Message("orders", b"soon%d" % i), level=1)  # 1 s
    for i in range(3):
        delays.send_delayed(Message("orders", b"later%d" % i), level=3)  # 10 s
    delays.send_delayed(Message("orders", b"timer"), deliver_at_ms=now + 7_200_000)
    # Deliver what is due 5 s from now: level 1 only.
    assert delays.deliver_due(now_ms=now + 5_000).levels_delivered == 2

    assert call(base, "GET", "/v1/delays", token=None)[0] == 401
    code, out = call(base, "GET", "/v1/delays")
    assert code == 200, out
    levels = {lv["level"]: lv for lv in out["levels"]}
    assert len(levels) == 18
    one, three = levels[1], levels[3]
    assert (one["offset"], one["max_offset"], one["backlog"], one["progress"]) == (
        2, 2, 0, 100.0
    )  # fmt: skip
    assert (three["offset"], three["max_offset"], three["backlog"]) == (0, 3, 3)
    assert three["progress"] == 0.0 and three["delay_ms"] == 10_000
    assert now + 10_000 <= three["next_due_ms"] <= out["now_ms"] + 10_000
    assert levels[2]["max_offset"] == 0 and levels[2]["progress"] == 100.0
    timers = out["timers"]
    assert (timers["pending"], timers["due_next_day"]) == (1, 1)
    assert timers["next_due_ms"] == now + 7_200_000
    # What was delivered is the two messages of level 1, on their topic.
    cfg = ep.store.topic_config("orders")
    bodies = [
        m.body
        for q in range(cfg.queue_nums)
        for m in ep.broker.pull("g", "orders", q, 0).messages
    ]
    assert sorted(bodies) == [b"soon0", b"soon1"]
