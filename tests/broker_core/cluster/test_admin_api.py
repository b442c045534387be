"""The node's admin API over real HTTP against a running endpoint process:
the token is required, halves are listed and decided by an operator's name,
conflicts and unknown ids get their status codes."""

from __future__ import annotations

import json
import math
import shutil
import socket
import struct
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from broker_core import Broker, Message
from broker_core.cluster.node_ops import NodeUnavailableError, RemoteNodeOps
from broker_core.endpoint.clients import ClientInfo
from broker_core.endpoint.config import CLIENT_MEMORY_S
from broker_core.errors import (
    BrokerError,
    FilterSyntaxError,
    GroupNotConsumingError,
    InvalidOffsetError,
    InvalidQueueError,
    PromotionRefusedError,
    TopicExistsError,
    TopicNotFoundError,
    ValidationError,
)
from broker_core.message import MessageInner
from broker_core.metadata import PERM_READ, PERM_WRITE
from broker_core.schedule import DelayService
from broker_core.search import MessageQuery
from broker_core.transaction import TransactionService
from broker_core.validation import SCHEDULE_TOPIC, TIMER_TOPIC
from tests.support import admin_of_store

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

    def __init__(self, proc, grpc, admin, log=None):
        self.proc = proc
        self.access = f"127.0.0.1:{grpc}"
        self.base = f"http://127.0.0.1:{admin}"
        self.log = log

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=20)


def _serve(tmp_path, store, *extra, log=None, admin=True):
    """``serve`` on ``store`` (``extra``: more options, e.g. ``--admin-only``;
    without ``admin``, the gRPC endpoint alone); its output goes to ``log``
    if given."""
    (tmp_path / "token").write_text(TOKEN + "\n")
    grpc, port = _port(), _port()
    admin_args = ["--admin-listen", f"127.0.0.1:{port}", "--admin-token-file",
                  str(tmp_path / "token")] if admin else []  # fmt: skip
    out = open(log, "w") if log else subprocess.DEVNULL  # noqa: SIM115
    proc = subprocess.Popen(
        [sys.executable, "-m", "broker_core", "serve", "--store", str(store),
         "--listen", f"127.0.0.1:{grpc}", *admin_args, "--no-redis-relay",
         "--no-topic-type-check", *extra],  # cluster_client sends halves, delays
        cwd=ROOT, stdout=out, stderr=subprocess.STDOUT if log else out,
    )  # fmt: skip
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(
                ("127.0.0.1", port if admin else grpc), timeout=1
            ).close()
            break
        except OSError:
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.1)
    return _Served(proc, grpc, port, log)


def ops(base: str, token: str = TOKEN, **kwargs) -> RemoteNodeOps:
    """The node's operations through its admin API."""
    return RemoteNodeOps(base, token, timeout=10, **kwargs)


def _refused(fn, *args, **kwargs) -> BrokerError:
    """The ``BrokerError`` ``fn`` raises (the node's own, raised again here)."""
    with pytest.raises(BrokerError) as info:
        fn(*args, **kwargs)
    return info.value


def test_admin_api_lists_and_decides_halves(node):
    base, ids = node
    for token in ("", "wrong"):
        err = _refused(ops(base, token).list_halves)
        assert isinstance(err, NodeUnavailableError) and err.status == 401
    page = ops(base).list_halves(state="PENDING")
    assert sorted(h.transaction_id for h in page.items) == sorted(ids)
    assert {h.keys for h in page.items} == {"o0", "o1", "o2"}

    ops(base).rollback(ids[0], "al")
    ops(base).commit(ids[1], "al")
    assert _refused(ops(base).commit, ids[0], "al").http_status == 409  # rolled back
    assert _refused(ops(base).commit, "ABCDEF", "al").http_status == 404

    pending = ops(base).list_halves(state="PENDING")
    assert [h.transaction_id for h in pending.items] == [ids[2]]
    done = ops(base).list_halves(state="ROLLED_BACK")
    assert [(h.transaction_id, h.operator) for h in done.items] == [(ids[0], "al")]
    status = ops(base).node_status()
    assert status["role"] == "ASYNC_MASTER" and status["log_end"] > 0
    assert "orders" in {cfg.topic_name for cfg, _ in ops(base).topics_with_depths()}


def test_admin_api_serves_the_operations_and_metrics_only(node):
    """The REST paths it once served beside the operations are gone."""
    base, _ids = node
    for method, path in (("GET", "/v1/node"), ("GET", "/v1/halves"),
                         ("POST", "/v1/promote"), ("POST", "/v1/topics"),
                         ("GET", "/v1/ops/node_status")):  # fmt: skip
        code, out = call(base, method, path, {} if method == "POST" else None)
        assert code == 404, (path, out)
    code, out = call(base, "POST", "/v1/ops/node_status", {})
    assert code == 200 and out["result"]["role"] == "ASYNC_MASTER"


def test_admin_api_creates_topics(node):
    base, _ = node
    made = ops(base).create_topic("payments", 2, 2, PERM_READ | PERM_WRITE, "NORMAL")
    assert (made.topic_name, made.read_queue_nums) == ("payments", 2)
    again = ops(base).create_topic
    assert isinstance(_refused(again, "payments", 2, 2, 6, "NORMAL"), TopicExistsError)
    changed = ops(base).update_topic("payments", read_queue_nums=3, write_queue_nums=3)
    assert changed.read_queue_nums == 3
    got = {cfg.topic_name: depths for cfg, depths in ops(base).topics_with_depths()}
    assert got["payments"] == [0, 0, 0]
    bad = _refused(ops(base).create_topic, "bad topic!", 1, 1, 6, "NORMAL")
    assert bad.http_status == 400


def test_an_unreachable_node_is_unavailable_with_no_status():
    # A port nothing listens on: the connection is refused.
    err = _refused(ops(f"http://127.0.0.1:{_port()}").node_status)
    assert isinstance(err, NodeUnavailableError) and err.status is None
    assert "node_status" in str(err)
    err = _refused(ops("").node_status)
    assert isinstance(err, NodeUnavailableError) and "no admin API" in str(err)


class _Recorder:
    """A real HTTP server that answers every request with ``code`` and a
    body that is no operation's, and records each request's headers."""

    def __init__(self, code: int, body: bytes) -> None:
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        seen = self.seen = []

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                seen.append((self.path, dict(self.headers)))
                self.send_response(code)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base = f"http://127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_a_node_answering_an_error_status_is_unavailable_with_it():
    for code, body in ((502, b"<html>bad gateway</html>"),
                       (500, b'{"error": "disk on fire"}')):  # fmt: skip
        server = _Recorder(code, body)
        try:
            err = _refused(ops(server.base).node_status)
        finally:
            server.close()
        assert isinstance(err, NodeUnavailableError) and err.status == code, err
        assert [p for p, _ in server.seen] == ["/v1/ops/node_status"]
    server = _Recorder(200, b'{"no": "result"}')
    try:
        err = _refused(ops(server.base).promote, "ops")
    finally:
        server.close()
    assert isinstance(err, NodeUnavailableError) and "no result" in str(err)


def test_a_host_outside_the_allowed_hosts_never_gets_the_token():
    server = _Recorder(200, b'{"result": {}}')
    try:
        for allowed in (["10.9.9.9"], ["10.0.0.0/8", "admin.example"]):
            remote = ops(server.base, allowed_hosts=allowed)
            for call_it, args in ((remote.node_status, ()), (remote.promote, ("ops",)),
                                  (remote.within(1.0).consumer_lag, ())):  # fmt: skip
                err = _refused(call_it, *args)
                assert isinstance(err, NodeUnavailableError)
                assert "127.0.0.1 is not in CLUSTER_ADMIN_HOSTS" in str(err)
        assert server.seen == []  # no request, so no token, ever reached it
        assert ops(server.base, allowed_hosts=["127.0.0.0/8"]).node_status() == {}
        [(_path, headers)] = server.seen
        assert headers["Authorization"] == f"Bearer {TOKEN}"
    finally:
        server.close()


def test_local_node_ops_without_a_server_say_the_store_and_refuse_promotion(
    tmp_path,
):
    from broker_core.cluster.node_ops import NodeOperations, NodeOps

    with Broker.open(str(tmp_path / "store")) as b:
        b.send(Message("orders", b"x"))
        local = NodeOps(lambda: b, lambda: None, lambda: None, lambda g=None: [])
        assert isinstance(local, NodeOperations)
        assert isinstance(ops("http://127.0.0.1:1"), NodeOperations)
        status = local.node_status()
        assert (status["role"], status["node"], status["cluster"]) == (
            "ASYNC_MASTER", "", ""
        )  # fmt: skip
        assert status["log_end"] == b.store.max_physical_offset() > 0
        assert status["runtime"]["version"] and status["cut_tails"] == []
        err = _refused(local.promote, "ops")
        assert isinstance(err, PromotionRefusedError)


def test_every_operation_is_in_the_protocol_and_both_kinds_of_node():
    import inspect

    from broker_core.cluster.node_ops import OPERATIONS, NodeOperations, NodeOps

    listed = {n for n, v in vars(NodeOperations).items()
              if callable(v) and not n.startswith("_")}  # fmt: skip
    assert listed == OPERATIONS
    for name in OPERATIONS:
        assert callable(getattr(RemoteNodeOps, name)), name
        want = inspect.signature(getattr(NodeOperations, name))
        assert inspect.signature(getattr(NodeOps, name)) == want, name


@pytest.fixture
def endpoint(tmp_path):
    """A store with its endpoint (not serving gRPC) and its admin API on a
    free port: what ``serve --admin-listen`` runs, in this process."""
    with admin_of_store(tmp_path / "store", TOKEN) as admin:
        yield f"http://{admin.address}", admin.ep


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

    assert _refused(ops(base, "wrong").consumer_lag).status == 401
    rows = {(q.group, q.topic, q.queue_id): q for q in ops(base).consumer_lag()}
    assert {k: (q.committed_offset, q.max_offset, q.lag)
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
    lag = {(q.group, q.queue_id): q.lag for q in ops(base).consumer_lag()}
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

    assert _refused(ops(base, "wrong").delay_stats).status == 401
    out = ops(base).delay_stats().as_json()
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

    assert _refused(ops(base, "wrong").search_messages, MessageQuery(), 1, None,
                    1).status == 401  # fmt: skip

    def search(limit=20, cursor=None, **query):
        return ops(base).search_messages(MessageQuery(**query), limit, cursor, 1000)

    # By key in a topic: the one message, with its properties and its body.
    [m] = search(topic="orders", key="k5").messages
    assert (m.msg_id, m.queue_id, m.keys, m.tags) == (sent[5].msg_id, 1, "k5", "paid")
    assert m.body == b"order-5" and m.properties["shop"] == "s1"
    # By message id, the whole body (not UTF-8) as it was sent.
    [m] = search(msg_id=large.msg_id).messages
    assert m.body == big and ops(base).get_message(large.msg_id).body == big
    # A page of one queue from an offset, in queue order.
    page = ops(base).browse_queue("orders", 0, 1, None, 2)
    assert [m.body for m in page.messages] == [b"order-2", b"order-4"]
    assert (page.start, page.max_offset, page.next_start) == (1, 5, 3)
    # A scan of the topic, newest first, with the search's tag filter.
    first = search(limit=3, topic="orders", tag="paid")
    assert [m.keys for m in first.messages] == ["k7", "k5", "k3"]
    assert first.cursor
    more = search(limit=3, cursor=first.cursor, topic="orders", tag="paid")
    assert [m.keys for m in more.messages] == ["k1"]

    # An unknown id finds nothing; refusals are the library's own errors.
    assert search(msg_id="0123456789ABCDEF0123456789ABCDEF").messages == []
    for query, error in (
        ({"topic": "nope", "key": "k1"}, TopicNotFoundError),
        ({"topic": "orders", "sql": "a ="}, FilterSyntaxError),
        ({}, ValidationError),
    ):
        got = _refused(search, **query)
        assert type(got) is error and not isinstance(got, NodeUnavailableError), query


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
    reset = ops(base).apply_reset

    for args, kwargs, error in (
        (("analytics", "events"), {"to_offset": 2, "queue_id": 7}, InvalidQueueError),
        (("analytics", "events"), {"to_offset": 11, "queue_id": 0},
         InvalidOffsetError),
        (("analytics", "nope"), {"to_offset": 2}, TopicNotFoundError),
        (("billing", "events"), {"to_offset": 0}, GroupNotConsumingError),
    ):  # fmt: skip
        got = _refused(reset, *args, **kwargs)
        assert isinstance(got, error), (args, kwargs, got)
    assert broker.committed_offset("analytics", "events", 0) == 10  # unchanged

    # Queue 0 back to offset 2: its messages from there are read again.
    changes = reset("analytics", "events", to_offset=2, queue_id=0)
    assert [c.as_json() for c in changes] == [
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
    lag = ops(base).consumer_lag()
    assert {(q.queue_id, q.lag) for q in lag} == {(0, 8), (1, 3)}

    # Every queue to a time: 0 is before every message, so all are unread.
    changes = reset("analytics", "events", to_ms=0)
    assert [(c.queue_id, c.target) for c in changes] == [(0, 0), (1, 0)]
    assert broker.committed_offset("analytics", "events", 1) == 0


def test_admin_api_cancels_delayed_messages(endpoint):
    import time

    base, ep = endpoint
    delays = ep.delays
    now = int(time.time() * 1000)
    level = delays.send_delayed(Message("orders", b"level"), level=3)
    keep = delays.send_delayed(Message("orders", b"keep"), level=3)
    timer = delays.send_delayed(Message("orders", b"timer"), deliver_at_ms=now + 60_000)

    assert _refused(ops(base, "wrong").recall, level.msg_id).status == 401
    out = ops(base).recall(level.msg_id)
    assert (out.kind.value, out.level, out.real_topic) == ("level", 3, "orders")
    assert ops(base).recall(timer.offset_msg_id).kind.value == "timer"
    assert _refused(ops(base).recall, level.msg_id).http_status == 409  # cancelled
    unknown = "0123456789ABCDEF0123456789ABCDEF"
    assert _refused(ops(base).recall, unknown).http_status == 404
    stats = ops(base).delay_stats().as_json()
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
    """Poll ``consumer_lag`` until queue 0 of ``group`` is committed at ``want``."""
    deadline = time.monotonic() + timeout
    while True:
        out = ops(base).consumer_lag()
        got = {
            q.committed_offset
            for q in out
            if (q.group, q.topic, q.queue_id) == (group, topic, 0)
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
        ops(base).create_topic("events", 1, 1, PERM_READ | PERM_WRITE, "NORMAL")
        sent = _client("send", served.access, "events", "6", "ev")
        assert len(sent["sent"]) == 6, sent
        got = _client("consume", served.access, "GID_ev", "events", "6", "30", "ev")
        assert sorted(got["bodies"]) == [f"ev-{i}" for i in range(6)]
        _committed(base, "GID_ev", "events", 6)

        [consumer] = ops(base).clients("GID_ev")
        assert (consumer["client_type"], consumer["topics"]) == (
            "SIMPLE_CONSUMER", ["events"]
        )  # fmt: skip
        assert consumer["last_heartbeat_ms"] > 0
        everyone = ops(base).clients()
        assert {c["client_type"] for c in everyone} == {
            "PRODUCER", "SIMPLE_CONSUMER"
        }  # fmt: skip

        page = ops(base).search_messages(
            MessageQuery(topic="events", key="ev-3"), 20, None, 1000
        )
        assert [m.body for m in page.messages] == [b"ev-3"]

        ops(base).apply_reset("GID_ev", "events", to_offset=2, queue_id=0)
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
    assert _refused(ops(base, "wrong").promote, "ops").status == 401
    for args, kwargs, field in (
        (("ops",), {"role": "X"}, "role:"),
        (("  ",), {}, "operator:"),
        (("ops",), {"force": "no"}, "force:"),
    ):
        got = _refused(ops(base).promote, *args, **kwargs)
        assert isinstance(got, ValidationError) and str(got).startswith(field), got
    got = _refused(ops(base).promote, "ops")
    assert isinstance(got, PromotionRefusedError) and got.http_status == 409
    assert "not a cluster node" in str(got)


def test_admin_api_refuses_a_bad_content_length(node):
    import http.client
    import urllib.parse

    base, _ids = node
    url = urllib.parse.urlsplit(base)
    for length in ("-1", "x", str(9 << 20)):
        conn = http.client.HTTPConnection(url.hostname, url.port, timeout=10)
        conn.putrequest("POST", "/v1/ops/create_topic")
        conn.putheader("Authorization", f"Bearer {TOKEN}")
        conn.putheader("Content-Length", length)
        conn.endheaders()
        r = conn.getresponse()
        assert r.status == 400, length
        assert json.loads(r.read())["error"].startswith("Content-Length:"), length
        conn.close()


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
    ops(base).rollback(ids[0], "al")
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


def _gauge(m: dict[tuple, float], name: str, **labels: str) -> float | None:
    return m.get(("rocketmq_broker_" + name, tuple(sorted(labels.items()))))


def test_admin_api_metrics_never_report_overdue_from_the_epoch(tmp_path):
    """Heads of delay levels whose due time reads 0 (a unit's tag field
    zeroed; a damaged record's placeholder, rebuilt while serving) and a
    timer without its due time: every message is due in an hour or more, so
    nothing is overdue, not the ~1.8e9 seconds since the epoch. Served by
    ``serve --admin-only``, which delivers nothing: the heads stay."""
    store = tmp_path / "store"
    with Broker.open(str(store)) as b:
        delays = DelayService(b)
        for i in range(3):
            delays.send_delayed(Message("orders", b"2h-%d" % i), level=18)
        for i in range(2):
            delays.send_delayed(Message("orders", b"1h-%d" % i), level=17)
        delays.send_delayed(Message("orders", b"timer"), delay_ms=3_600_000)
        b.store.put_inner(MessageInner(TIMER_TOPIC, 0, b"its due time lost"))
        [(phys, _size, _due)] = b.store.get_queue_units(SCHEDULE_TOPIC, 16, 0, 1)
        delays.close()
    # Level 18 (queue 17): the due time of its first unit zeroed.
    with open(
        store / "consumequeue" / SCHEDULE_TOPIC / "17" / f"{0:020d}", "r+b"
    ) as fh:
        fh.seek(12)  # offset q | size i | tag code q
        fh.write(bytes(8))
    # Level 17 (queue 16): its first record's queue offset damaged; its unit
    # then names no record and is rebuilt as a placeholder (due time 0).
    with open(store / "commitlog" / f"{0:020d}", "r+b") as fh:
        fh.seek(phys + 20)
        fh.write(struct.pack(">q", 999))
    log = tmp_path / "serve.log"
    served = _serve(tmp_path, store, "--admin-only", log=log)
    try:
        m = _scrape(served.base)
        out = ops(served.base).delay_stats().as_json()
    finally:
        served.stop()
    for level in ("17", "18", "timer"):
        assert _gauge(m, "delay_overdue_seconds", level=level) == 0, (level, m)
    assert _gauge(m, "delay_backlog", level="18") == 3
    assert _gauge(m, "delay_backlog", level="17") == 2
    assert _gauge(m, "delay_backlog", level="timer") == 2
    assert "named no record" in log.read_text()  # the placeholder was made
    # The next due times are the real ones of the messages after the heads.
    hour = 3_600_000
    levels = {lv["level"]: lv for lv in out["levels"]}
    assert levels[18]["next_due_ms"] > out["now_ms"] + hour
    assert levels[17]["next_due_ms"] > out["now_ms"] + hour - 60_000
    assert levels[17]["oldest_overdue_ms"] == levels[18]["oldest_overdue_ms"] == 0
    assert out["timers"]["next_due_ms"] > out["now_ms"] + hour - 60_000


def test_admin_api_metrics_show_a_damaged_store(tmp_path):
    """Consume-queue directories deleted while the node was down (a group
    had committed on one, a delay level had delivered from the other): their
    depths read 0, so the damage is reported (``store_damaged``,
    ``queue_damaged`` with why) and the level's backlog is NaN, not a silent
    0; likewise the timer queue's. A directory deleted under the running
    node, which still reads its mapping, is ``missing``. The delivering node
    moves the delivered offsets back to the queues' ends; the admin API
    alone (``make run``), started after it, still sees the loss. (Their
    records lie in an early segment: a queue that lost units of the log's
    last records is rebuilt at open, and reports nothing.)"""
    store = tmp_path / "store"
    with Broker.open(str(store), segment_size=64 * 1024) as b:
        b.create_topic("events", 2)
        b.send_batch([Message("events", b"e%d" % i, queue_id=i % 2) for i in range(20)])
        _consume(b, "g", "events", 0, 6)
        _consume(b, "g", "events", 1, 4)
        delays = DelayService(b)
        now = int(time.time() * 1000)
        for i in range(4):
            delays.send_delayed(Message("orders", b"d%d" % i), level=3)
        delays.send_delayed(Message("orders", b"timer"), delay_ms=1000)
        done = delays.deliver_due(now_ms=now + 60_000)
        assert (done.levels_delivered, done.timers_delivered) == (4, 1)
        for i in range(2):
            delays.send_delayed(Message("orders", b"later%d" % i), level=3)
        delays.close()
        # Later traffic elsewhere: the records above are out of the range a
        # normal open verifies (the log's last segment).
        for _ in range(3):
            b.send_batch([Message("filler", b"f" * 500) for _ in range(150)])
    cq = store / "consumequeue"
    shutil.rmtree(cq / "events" / "0")
    shutil.rmtree(cq / SCHEDULE_TOPIC / "2")  # level 3
    shutil.rmtree(cq / TIMER_TOPIC / "0")

    def damaged(m):
        return {
            (lb["topic"], lb["queue"], lb["reason"])
            for (name, labels), v in m.items()
            if name == "rocketmq_broker_queue_damaged" and v == 1
            for lb in [dict(labels)]
        }

    served = _serve(tmp_path, store, "--embedded-timers")  # it delivers delays
    try:
        m = _scrape(served.base)
        assert _gauge(m, "store_damaged") == 3, m
        assert damaged(m) == {("events", "0", "short"),
                              (SCHEDULE_TOPIC, "2", "short"),
                              (TIMER_TOPIC, "0", "short")}  # fmt: skip
        assert math.isnan(_gauge(m, "delay_backlog", level="3"))
        assert math.isnan(_gauge(m, "delay_backlog", level="timer"))
        assert _gauge(m, "delay_backlog", level="4") == 0

        shutil.rmtree(cq / "events" / "1")  # under the running node
        m = _scrape(served.base)
        assert _gauge(m, "store_damaged") == 4, m
        assert ("events", "1", "missing") in damaged(m)
    finally:
        served.stop()
    saved = json.loads((store / "config" / "delayOffset.json").read_text())
    assert saved["offsetTable"]["3"] == 0 and saved["timerLow"] == 0
    assert saved["unitsLostUpTo"] == {"0": 1, "3": 4}

    served = _serve(tmp_path, store, "--admin-only")
    try:
        m = _scrape(served.base)
    finally:
        served.stop()
    assert damaged(m) == {("events", "0", "short"), ("events", "1", "short"),
                          (SCHEDULE_TOPIC, "2", "short"),
                          (TIMER_TOPIC, "0", "short")}  # fmt: skip
    assert _gauge(m, "store_damaged") == 4
    assert math.isnan(_gauge(m, "delay_backlog", level="3"))


def test_admin_api_metrics_on_a_whole_store_report_no_damage(node):
    base, _ids = node
    m = _scrape(base)
    assert _gauge(m, "store_damaged") == 0
    assert not [k for k in m if k[0] == "rocketmq_broker_queue_damaged"]


def _raw_send(stub, topic: str, n: int) -> None:
    """``n`` sends as bare gRPC calls: no heartbeat, no telemetry, so the
    endpoint's client table does not change."""
    import uuid

    from rocketmq.grpc_protocol import definition_pb2 as pb
    from rocketmq.grpc_protocol import service_pb2 as spb

    for _ in range(n):
        msg = pb.Message(
            topic=pb.Resource(name=topic),
            system_properties=pb.SystemProperties(
                message_id=uuid.uuid4().hex, body_encoding=pb.IDENTITY
            ),
            body=b"counted",
        )
        r = stub.SendMessage(
            spb.SendMessageRequest(messages=[msg]),
            metadata=(("x-mq-client-id", "raw-sender"),),
            timeout=30,
        )
        assert [e.status.code for e in r.entries] == [pb.Code.OK], r


def test_admin_api_alone_follows_the_endpoint_counters(tmp_path):
    """``make run``'s layout: the endpoint serves gRPC, the admin API runs
    alone beside it (``--admin-only``) and reads the endpoint's counters from
    ``clients.json``. Sends that change no client still reach ``/metrics``
    within a couple of seconds, each time."""
    import grpc
    from rocketmq.grpc_protocol import service_pb2_grpc as sgrpc

    store = tmp_path / "store"
    with Broker.open(str(store)) as b:
        b.create_topic("events", 1)
    endpoint = _serve(tmp_path, store, admin=False)
    admin = _serve(tmp_path, store, "--admin-only")
    channel = grpc.insecure_channel(endpoint.access)
    try:
        stub = sgrpc.MessagingServiceStub(channel)
        for want in (3, 5):
            _raw_send(stub, "events", want - (3 if want == 5 else 0))
            deadline = time.monotonic() + 10
            while True:
                m = _scrape(admin.base)
                if _gauge(m, "endpoint_events_total", event="sent") == want:
                    break
                assert time.monotonic() < deadline, (want, m)
                time.sleep(0.2)
    finally:
        channel.close()
        admin.stop()
        endpoint.stop()


def test_admin_api_of_workers_counts_every_worker(tmp_path):
    """``serve --workers 2``: worker 0 serves the admin API; its counters
    are every worker's (``clients.json`` sums them), not worker 0's share."""
    import grpc
    from rocketmq.grpc_protocol import service_pb2_grpc as sgrpc

    from tests.broker_core.ha._hahelpers import redis_up
    from tests.endpoint_server import start_server, stop_server

    if not redis_up():
        pytest.skip("no Redis on 127.0.0.1:6379 (make redis)")
    store = tmp_path / "store"
    with Broker.open(str(store)) as b:
        b.create_topic("events", 1)
    (tmp_path / "token").write_text(TOKEN + "\n")
    for attempt in range(3):
        # Free ports may be taken before the workers bind them (``pinned + 1``
        # is not even checked free): start again on others.
        port, pinned, admin = _port(), _port(), _port()
        while len({port, pinned, pinned + 1, admin}) < 4:
            pinned = _port()
        try:
            proc = start_server(
                store, port, tmp_path / f"server-{attempt}.log",
                ("--worker-ports", str(pinned), "--admin-listen",
                 f"127.0.0.1:{admin}", "--admin-token-file", str(tmp_path / "token")),
                workers=2,
            )  # fmt: skip
            break
        except RuntimeError:
            if attempt == 2:
                raise
    try:
        for worker, n in ((0, 2), (1, 3)):  # each worker's own port
            with grpc.insecure_channel(f"127.0.0.1:{pinned + worker}") as channel:
                _raw_send(sgrpc.MessagingServiceStub(channel), "events", n)
        deadline = time.monotonic() + 10
        while True:
            m = _scrape(f"http://127.0.0.1:{admin}")
            if _gauge(m, "endpoint_events_total", event="sent") == 5:
                break
            assert time.monotonic() < deadline, m
            time.sleep(0.2)
    finally:
        assert stop_server(proc) == 0


def test_endpoint_writes_changed_counters_at_most_once_a_second(endpoint):
    """Counters alone rewrite ``clients.json``, but not more than once a
    second: the check is on the half-second persist loop, not on the sends."""
    _base, ep = endpoint
    assert ep.clients_snapshot() is not None  # the first, at start
    assert ep.clients_snapshot() is None  # nothing changed
    ep.counters["sent"] += 1  # as a send does
    assert ep.clients_snapshot() is None  # within the second
    time.sleep(1.05)
    snap = ep.clients_snapshot()
    assert snap is not None and snap["counters"]["sent"] == 1
    time.sleep(1.05)
    assert ep.clients_snapshot() is None  # nothing changed since


def test_endpoint_forgets_clients_gone_longer_than_a_restart_remembers(endpoint):
    """Clients that come and go (killed, redeployed, a new id each run) are
    dropped from the table once offline for ``CLIENT_MEMORY_S``, as a restart
    would drop them: a long-running endpoint does not keep them all (an
    outside trial's 204 killed consumers stayed listed, memory growing). The
    online and the recently gone stay."""
    _base, ep = endpoint
    now = time.time()
    old = now - CLIENT_MEMORY_S - 5
    ep.clients["gone"] = ClientInfo("gone", last_heartbeat=old, online=False)
    ep.clients["recent"] = ClientInfo("recent", last_heartbeat=now - 30, online=False)
    # online but silent (no Telemetry stream) for longer: marked offline
    # first, and forgotten in the same pass
    ep.clients["silent"] = ClientInfo("silent", last_heartbeat=old, online=True)
    ep.clients["live"] = ClientInfo("live", last_heartbeat=now, online=True)
    snap = ep.clients_snapshot(force=True)
    assert sorted(ep.clients) == ["live", "recent"]
    assert sorted(c["client_id"] for c in snap["clients"]) == ["live", "recent"]
    ep.save_clients(force=True)
    listed = json.loads((ep.store.root / "clients.json").read_text())["clients"]
    assert sorted(c["client_id"] for c in listed) == ["live", "recent"]


def test_admin_api_shrugs_off_clients_that_go_away(tmp_path):
    """Connections dropped before their answer (no token, then a reset or a
    close): nothing but the answers' debug lines, no traceback in the serve
    log; the API goes on answering."""
    log = tmp_path / "serve.log"
    served = _serve(tmp_path, tmp_path / "store", log=log)
    try:
        url = urllib.parse.urlsplit(served.base)
        for i in range(20):
            s = socket.create_connection((url.hostname, url.port))
            if i % 2:  # close with a reset
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                             struct.pack("ii", 1, 0))  # fmt: skip
            s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            s.close()
        time.sleep(1)
        assert "log_end" in ops(served.base).node_status()
    finally:
        served.stop()
    text = log.read_text()
    for word in ("Traceback", "BrokenPipeError", "ConnectionResetError"):
        assert word not in text, text[-3000:]
