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
    served = _serve(tmp_path, store)
    yield served.base, ids
    served.stop()


class _Served:
    """``serve`` with its admin API on free ports, in its own process."""

    def __init__(self, proc, grpc, admin):
        self.proc = proc
        self.access = f"127.0.0.1:{grpc}"
        self.base = f"http://127.0.0.1:{admin}"

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=20)


def _serve(tmp_path, store):
    (tmp_path / "token").write_text(TOKEN + "\n")
    grpc, admin = _port(), _port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "broker_core", "serve", "--store", str(store),
         "--listen", f"127.0.0.1:{grpc}", "--admin-listen", f"127.0.0.1:{admin}",
         "--admin-token-file", str(tmp_path / "token"), "--no-redis-relay",
         "--no-topic-type-check"],  # cluster_client sends halves, delays
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", admin), timeout=1).close()
            break
        except OSError:
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.1)
    return _Served(proc, grpc, admin)


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


def test_admin_api_messages(endpoint):
    import base64

    base, ep = endpoint
    broker = ep.broker
    broker.create_topic("orders", 2)
    sent = [
        broker.send(
            Message("orders", b"order-%d" % i, tags="paid" if i % 2 else "new",
                    keys=f"k{i}", queue_id=i % 2, properties={"shop": "s1"})
        )
        for i in range(8)
    ]  # fmt: skip
    big = bytes(range(256)) * 12  # 3,072 bytes, not UTF-8
    large = broker.send(Message("orders", big, keys="big", queue_id=0))

    assert call(base, "GET", "/v1/messages?topic=orders", token=None)[0] == 401
    # By key in a topic: the one message, with its properties and its body.
    code, out = call(base, "GET", "/v1/messages?topic=orders&key=k5")
    assert code == 200, out
    [m] = out["messages"]
    assert (m["msg_id"], m["queue_id"], m["keys"], m["tags"]) == (
        sent[5].msg_id, 1, "k5", "paid"
    )  # fmt: skip
    assert m["body_preview"] == "order-5" and m["body_truncated"] is False
    assert m["properties"]["shop"] == "s1" and "body_base64" not in m
    # By message id, the whole body on request.
    code, out = call(base, "GET", f"/v1/messages?msg_id={large.msg_id}&body=base64")
    assert code == 200, out
    [m] = out["messages"]
    assert base64.b64decode(m["body_base64"]) == big
    assert m["body_size"] == 3072 and m["body_truncated"] is True
    assert len(m["body_preview"]) == 1024  # one character per byte replaced
    _, out = call(base, "GET", f"/v1/messages?msg_id={large.msg_id}&body=none")
    assert "body_preview" not in out["messages"][0]
    _, out = call(base, "GET", f"/v1/messages?msg_id={sent[0].msg_id}&preview_bytes=3")
    assert out["messages"][0]["body_preview"] == "ord"
    # A page of one queue from an offset, in queue order.
    code, out = call(
        base, "GET", "/v1/messages?topic=orders&queue_id=0&offset=1&limit=2"
    )
    assert code == 200, out
    assert [m["body_preview"] for m in out["messages"]] == ["order-2", "order-4"]
    assert (out["start"], out["max_offset"], out["next_offset"]) == (1, 5, 3)
    # A scan of the topic, newest first, with the search's tag filter.
    _, out = call(base, "GET", "/v1/messages?topic=orders&tag=paid&limit=3")
    assert [m["keys"] for m in out["messages"]] == ["k7", "k5", "k3"]
    assert out["cursor"]
    _, more = call(base, "GET", f"/v1/messages?topic=orders&tag=paid&limit=3"
                                f"&cursor={out['cursor']}")  # fmt: skip
    assert [m["keys"] for m in more["messages"]] == ["k1"]

    # Unknown things are 404; bad input is 400 with the field named.
    unknown = "0123456789ABCDEF0123456789ABCDEF"
    for path, status, field in (
        (f"/v1/messages?msg_id={unknown}", 404, "msg_id"),
        ("/v1/messages?topic=nope&key=k1", 404, "topic"),
        ("/v1/messages?topic=orders&limit=x", 400, "limit"),
        ("/v1/messages?topic=orders&limit=500", 400, "limit"),
        ("/v1/messages?topic=orders&body=base64&limit=100", 400, "limit"),
        ("/v1/messages?topic=orders&offset=0", 400, "queue_id"),
        ("/v1/messages?topic=orders&queue_id=9&offset=0", 400, "queue_id"),
        ("/v1/messages?topic=orders&sql=a+%3D", 400, "sql"),
        ("/v1/messages?topic=orders&body=all", 400, "body"),
        ("/v1/messages", 400, "topic"),
    ):
        code, out = call(base, "GET", path)
        assert (code, out["error"].split(":")[0]) == (status, field), (path, out)


def _consume(broker, group, topic, qid, count):
    got = broker.pull(group, topic, qid, 0, max_messages=count)
    assert len(got.messages) == count
    broker.commit_offset(group, topic, qid, got.next_offset)


def test_admin_api_resets_offsets(endpoint):
    base, ep = endpoint
    broker = ep.broker
    broker.create_topic("events", 2)
    broker.send_batch(
        [Message("events", b"e%d" % i, queue_id=i % 2) for i in range(20)]
    )
    _consume(broker, "analytics", "events", 0, 10)
    _consume(broker, "analytics", "events", 1, 7)
    path = "/v1/consumers/analytics/reset"

    for body, status, field in (
        ({"topic": "events", "offset": 2}, 400, "operator"),
        ({"operator": "al", "offset": 2}, 400, "topic"),
        ({"operator": "al", "topic": "events"}, 400, "timestamp, offset"),
        ({"operator": "al", "topic": "events", "offset": 2, "timestamp": 0}, 400,
         "timestamp, offset"),
        ({"operator": "al", "topic": "events", "offset": "x"}, 400, "offset"),
        ({"operator": "al", "topic": "events", "offset": 2, "queue_id": 7}, 400,
         "queue_id"),
        ({"operator": "al", "topic": "events", "offset": 11, "queue_id": 0}, 400,
         "offset"),
        ({"operator": "al", "topic": "nope", "offset": 2}, 404, "topic"),
    ):  # fmt: skip
        code, out = call(base, "POST", path, body)
        assert (code, out["error"].split(":")[0]) == (status, field), (body, out)
    code, out = call(base, "POST", "/v1/consumers/billing/reset",
                     {"operator": "al", "topic": "events", "offset": 0})  # fmt: skip
    assert code == 404 and out["error"].startswith("group:")
    assert broker.committed_offset("analytics", "events", 0) == 10  # unchanged

    # Queue 0 back to offset 2: its messages from there are read again.
    code, out = call(base, "POST", path, {"operator": "al", "topic": "events",
                                          "offset": 2, "queue_id": 0})  # fmt: skip
    assert code == 200, out
    assert out["changes"] == [
        {"topic": "events", "queue_id": 0, "current": 10, "target": 2,
         "max_offset": 10, "delta": 8, "lag_after": 8}
    ]  # fmt: skip
    assert broker.committed_offset("analytics", "events", 0) == 2
    assert broker.committed_offset("analytics", "events", 1) == 7
    again = broker.pull("analytics", "events", 0, 2, max_messages=3)
    assert [m.body for m in again.messages] == [b"e4", b"e6", b"e8"]
    # Written at once (not on the store's timer), and handed to the pop cursor.
    saved = json.loads((ep.store.root / "config" / "consumerOffset.json").read_text())
    assert saved["offsetTable"]["events@analytics"] == {"0": 2, "1": 7}
    assert list((ep.store.root / "grpc" / "resets").glob("*.json"))
    _, lag = call(base, "GET", "/v1/consumers")
    assert {(q["queue_id"], q["lag"]) for q in lag["queues"]} == {(0, 8), (1, 3)}

    # Every queue to a time: 0 is before every message, so all are unread.
    code, out = call(base, "POST", path, {"operator": "al", "topic": "events",
                                          "timestamp": 0})  # fmt: skip
    assert code == 200, out
    assert [(c["queue_id"], c["target"]) for c in out["changes"]] == [(0, 0), (1, 0)]
    assert broker.committed_offset("analytics", "events", 1) == 0


def test_admin_api_cancels_delayed_messages(endpoint):
    import time

    base, ep = endpoint
    delays = ep.delays
    now = int(time.time() * 1000)
    level = delays.send_delayed(Message("orders", b"level"), level=3)
    keep = delays.send_delayed(Message("orders", b"keep"), level=3)
    timer = delays.send_delayed(Message("orders", b"timer"), deliver_at_ms=now + 60_000)

    path = f"/v1/delays/{level.msg_id}/cancel"
    assert call(base, "POST", path, {"operator": "al"}, token=None)[0] == 401
    code, out = call(base, "POST", path, {"reason": "no operator"})
    assert code == 400 and out["error"].startswith("operator:")
    code, out = call(base, "POST", path, {"operator": "al", "reason": "wrong price"})
    assert code == 200, out
    assert (out["kind"], out["level"], out["real_topic"], out["operator"]) == (
        "level", 3, "orders", "al"
    )  # fmt: skip
    code, out = call(base, "POST", f"/v1/delays/{timer.offset_msg_id}/cancel",
                     {"operator": "al"})  # fmt: skip
    assert code == 200 and out["kind"] == "timer"
    assert call(base, "POST", path, {"operator": "al"})[0] == 409  # cancelled
    unknown = "/v1/delays/0123456789ABCDEF0123456789ABCDEF/cancel"
    assert call(base, "POST", unknown, {"operator": "al"})[0] == 404
    _, stats = call(base, "GET", "/v1/delays")
    assert {lv["level"]: lv["backlog"] for lv in stats["levels"]}[3] == 1
    assert stats["timers"]["pending"] == 0

    # Only the message left is delivered when they all fall due.
    assert delays.deliver_due(now_ms=now + 120_000).delivered == 1
    cfg = ep.store.topic_config("orders")
    bodies = [
        m.body
        for q in range(cfg.queue_nums)
        for m in ep.broker.pull("g", "orders", q, 0).messages
    ]
    assert bodies == [b"keep"] and keep.msg_id


CLIENT = Path(__file__).with_name("cluster_client.py")


def _client(*args: str) -> dict:
    """Run the official Python client (``cluster_client.py``); its result."""
    done = subprocess.run(
        [sys.executable, str(CLIENT), *args],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")]
    assert lines, done.stderr[-3000:]
    return json.loads(lines[-1][len("RESULT ") :])


def _committed(base, group, topic, want, timeout=20.0):
    """Poll ``/v1/consumers`` until queue 0 of ``group`` is committed at ``want``."""
    deadline = time.monotonic() + timeout
    while True:
        _, out = call(base, "GET", "/v1/consumers")
        got = {
            q["committed_offset"]
            for q in out["queues"]
            if (q["group"], q["topic"], q["queue_id"]) == (group, topic, 0)
        }
        if got == {want}:
            return
        assert time.monotonic() < deadline, (want, out)
        time.sleep(0.2)


def test_admin_api_with_the_official_client(tmp_path):
    """Clients, a search and a reset on a served node that the official
    client sends to and consumes from: the reset reaches the endpoint's pop
    cursor, so the consumer receives the messages again."""
    served = _serve(tmp_path, tmp_path / "store")
    try:
        base = served.base
        code, _ = call(base, "POST", "/v1/topics", {"topic": "events",
                                                    "read_queues": 1})  # fmt: skip
        assert code == 200
        sent = _client("send", served.access, "events", "6", "ev")
        assert len(sent["sent"]) == 6, sent
        got = _client("consume", served.access, "GID_ev", "events", "6", "30", "ev")
        assert sorted(got["bodies"]) == [f"ev-{i}" for i in range(6)]
        _committed(base, "GID_ev", "events", 6)

        code, out = call(base, "GET", "/v1/clients?group=GID_ev")
        assert code == 200, out
        [consumer] = out["clients"]
        assert (consumer["client_type"], consumer["topics"]) == (
            "SIMPLE_CONSUMER", ["events"]
        )  # fmt: skip
        assert consumer["last_heartbeat_ms"] > 0
        _, everyone = call(base, "GET", "/v1/clients")
        assert {c["client_type"] for c in everyone["clients"]} == {
            "PRODUCER", "SIMPLE_CONSUMER"
        }  # fmt: skip

        _, out = call(base, "GET", "/v1/messages?topic=events&key=ev-3")
        assert [m["body_preview"] for m in out["messages"]] == ["ev-3"]

        code, out = call(base, "POST", "/v1/consumers/GID_ev/reset",
                         {"operator": "al", "topic": "events", "offset": 2,
                          "queue_id": 0, "reason": "replay"})  # fmt: skip
        assert code == 200, out
        _committed(base, "GID_ev", "events", 2)
        again = _client("consume", served.access, "GID_ev", "events", "4", "30", "ev")
        assert sorted(again["bodies"]) == [f"ev-{i}" for i in range(2, 6)]
        _committed(base, "GID_ev", "events", 6)
    finally:
        served.stop()


def test_admin_api_promote_refuses_what_it_cannot_do(node):
    # tests/console/cluster/test_promote.py promotes a real slave; here, the
    # refusals of a node that is no slave.
    base, _ids = node
    assert call(base, "POST", "/v1/promote", {}, token="wrong")[0] == 401
    code, body = call(base, "POST", "/v1/promote", {"role": "ASYNC_MASTER"})
    assert code == 400 and body["error"].startswith("operator:")
    code, body = call(base, "POST", "/v1/promote", {"operator": "ops", "role": "X"})
    assert code == 400 and body["error"].startswith("role:")
    code, body = call(base, "POST", "/v1/promote", {"operator": "  "})
    assert code == 400 and body["error"].startswith("operator:")
    code, body = call(base, "POST", "/v1/promote", {"operator": "ops", "force": "no"})
    assert code == 400 and body["error"].startswith("force:")
    code, body = call(base, "POST", "/v1/promote", {"operator": "ops"})
    assert code == 409 and "not a cluster node" in body["error"]


def test_admin_api_refuses_a_bad_content_length(node):
    import http.client
    import urllib.parse

    base, _ids = node
    url = urllib.parse.urlsplit(base)
    for length in ("-1", "x", str(1 << 20)):
        conn = http.client.HTTPConnection(url.hostname, url.port, timeout=10)
        conn.putrequest("POST", "/v1/topics")
        conn.putheader("Authorization", f"Bearer {TOKEN}")
        conn.putheader("Content-Length", length)
        conn.endheaders()
        r = conn.getresponse()
        assert r.status == 400, length
        assert json.loads(r.read())["error"].startswith("Content-Length:"), length
        conn.close()


def test_admin_api_bounds_the_bodies_of_one_answer(endpoint, monkeypatch):
    import base64

    from broker_core.cluster import admin_store

    base, ep = endpoint
    ep.broker.create_topic("blobs", 1)
    body = bytes(range(256)) * 12  # 3,072 bytes
    ids = [ep.broker.send(Message("blobs", body, keys="b")).msg_id for _ in range(3)]
    monkeypatch.setattr(admin_store, "BASE64_BUDGET_BYTES", 7000)
    code, out = call(base, "GET", "/v1/messages?topic=blobs&key=b&body=base64")
    assert code == 200, out
    rows = {m["msg_id"]: m for m in out["messages"]}
    assert set(rows) == set(ids)
    whole = [m for m in rows.values() if "body_base64" in m]
    cut = [m for m in rows.values() if "body_omitted" in m]
    assert len(whole) == 2 and len(cut) == 1
    assert all(base64.b64decode(m["body_base64"]) == body for m in whole)
    assert "ask for this message by msg_id" in cut[0]["body_omitted"]
    # Asked alone, its body comes whole.
    _, one = call(base, "GET", f"/v1/messages?msg_id={cut[0]['msg_id']}&body=base64")
    assert base64.b64decode(one["messages"][0]["body_base64"]) == body


def _scrape(base: str, token: str | None = TOKEN) -> dict[tuple, float]:
    """``GET /metrics`` parsed with Prometheus' own parser: (name, labels
    without cluster/node) -> value."""
    from prometheus_client.parser import text_string_to_metric_families

    req = urllib.request.Request(
        base + "/metrics",
        headers={"Authorization": f"Bearer {token}"} if token else {},
    )
    with urllib.request.urlopen(req, timeout=10) as r:
        assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        text = r.read().decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            labels = tuple(
                sorted(
                    (k, v) for k, v in s.labels.items() if k not in ("cluster", "node")
                )
            )
            out[(s.name, labels)] = s.value
    return out


def test_admin_api_metrics_for_prometheus(node):
    """The node's figures in Prometheus' text format, behind the token:
    pending halves per topic follow an operator's decision, the outcome
    counter counts it, and the store's log end and disk are there."""
    base, ids = node
    with pytest.raises(urllib.error.HTTPError) as refused:
        _scrape(base, token=None)
    assert refused.value.code == 401
    m = _scrape(base)
    assert m[("rocketmq_broker_halves_pending", (("topic", "orders"),))] == 3
    assert m[("rocketmq_broker_info", (("role", "ASYNC_MASTER"),))] == 1
    assert m[("rocketmq_broker_may_write", ())] == 1
    assert m[("rocketmq_broker_commitlog_end_bytes", ())] > 0
    assert m[("rocketmq_broker_disk_free_bytes", ())] > 0
    assert m[("rocketmq_broker_delay_backlog", (("level", "timer"),))] == 0
    assert m[("rocketmq_broker_cut_tail_messages", ())] == 0
    code, out = call(base, "POST", f"/v1/halves/{ids[0]}/rollback", {"operator": "al"})
    assert code == 200, out
    deadline = time.monotonic() + 10
    while True:
        m = _scrape(base)
        if m[("rocketmq_broker_halves_pending", (("topic", "orders"),))] == 2:
            break
        assert time.monotonic() < deadline, m
        time.sleep(0.2)
    outcome = (
        "rocketmq_broker_transaction_outcomes_total",
        (("outcome", "rollbacks"),),
    )
    assert m[outcome] == 1
