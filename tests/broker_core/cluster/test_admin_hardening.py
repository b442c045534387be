"""The admin API against what an outside client may send it: arguments of the
wrong type or shape, JSON nested too deeply, methods it does not serve,
connections that send nothing or too little; each over a real server."""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from broker_core import Broker, Message
from broker_core.cluster.admin import AdminServer
from broker_core.cluster.node_ops import NodeOps
from broker_core.errors import (
    InvalidArgumentError,
    InvalidOffsetError,
    ValidationError,
)
from broker_core.offset_reset import preview_reset
from tests.broker_core.cluster.test_admin_api import TOKEN, _serve, call, ops
from tests.support import admin_of_store

pytestmark = [pytest.mark.services]


def _threads(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Threads:"):
            return int(line.split()[1])
    raise AssertionError("no Threads line")


@pytest.fixture
def served(tmp_path):
    """``serve --admin-listen`` in its own process, its output in a log."""
    log = tmp_path / "serve.log"
    s = _serve(tmp_path, tmp_path / "store", log=log)
    try:
        yield s
    finally:
        s.stop()


def _post(base: str, name: str, body: dict) -> tuple[int, dict]:
    return call(base, "POST", f"/v1/ops/{name}", body)


def test_arguments_of_the_wrong_type_are_refused_before_the_operation(served):
    """A float or a boolean where an operation takes an int, a string where
    it takes a number, an unknown keyword: 400 naming the argument, the type
    expected and the type given; nothing is stored and the node goes on
    answering (a stored float once broke every page and the flush)."""
    base = served.base
    refused = [
        ("create_topic", {"args": ["TF", 4.5, 4, 6, "NORMAL"]},
         "read_queue_nums: must be int, not float"),
        ("create_topic", {"args": ["TG", True, 4, 6, "NORMAL"]},
         "read_queue_nums: must be int, not bool"),
        ("create_topic", {"args": ["TA", "4", 4, 6, "NORMAL"]},
         "read_queue_nums: must be int, not str"),
        ("create_topic", {"args": ["TP", 4, 4, "x", "NORMAL"]},
         "perm: must be int, not str"),
        ("put_group", {"args": ["g2", 1, 2.5]}, "fifo: must be bool, not int"),
        ("put_group", {"args": ["g1", "yes", "x"]}, "fifo: must be bool, not str"),
        ("put_group", {"args": ["g3", True, 2.5]},
         "max_delivery_attempts: must be int | None, not float"),
        ("list_halves", {"kwargs": {"bogus": 1}},
         "unknown keyword argument 'bogus'"),
        ("list_halves", {"kwargs": {"page_size": "x"}},
         "page_size: must be int, not str"),
        ("list_halves", {"kwargs": {"sort": "nonsense"}}, "sort must be one of"),
        ("list_scheduled", {"args": [None, None, "x", 0]},
         "limit: must be int, not str"),
        ("recall", {"args": [5]}, "msg_id: must be str, not int"),
        ("get_topic", {"args": []}, "missing a required argument: 'name'"),
        ("node_status", {"args": [1]}, "too many positional arguments"),
    ]  # fmt: skip
    for name, body, want in refused:
        code, out = _post(base, name, body)
        assert code == 400, (name, body, code, out)
        assert want in out["error"], (name, body, out)
        assert "Traceback" not in out["error"]

    # A topic to update, then updates of the wrong type or an unknown setting.
    assert _post(base, "create_topic", {"args": ["TU", 2, 2, 6, "NORMAL"]})[0] == 200
    for changes, want in (
        ({"write_queue_nums": 2.5}, "write_queue_nums: must be int | None, not float"),
        ({"perm": False}, "perm: must be int | None, not bool"),
        ({"bogus": 1}, "unknown keyword argument 'bogus'"),
        ({"topic": "other"}, "unknown keyword argument 'topic'"),
    ):
        code, out = _post(base, "update_topic", {"args": ["TU"], "kwargs": changes})
        assert code == 400 and want in out["error"], (changes, out)

    # Through ``RemoteNodeOps``, the console gets the library's error back.
    with pytest.raises(InvalidArgumentError, match="read_queue_nums: must be int"):
        ops(base).create_topic("TR", 4.5, 4, 6, "NORMAL")
    with pytest.raises(InvalidArgumentError, match="unknown keyword argument"):
        ops(base).update_topic("TU", queues=3)

    # Nothing of it stored; every reader of the topics still answers.
    topics = {cfg.topic_name: cfg for cfg, _ in ops(base).topics_with_depths()}
    assert not {"TF", "TG", "TA", "TP", "TR"} & set(topics)
    assert (topics["TU"].read_queue_nums, topics["TU"].write_queue_nums) == (2, 2)
    assert not {g.name for g in ops(base).groups()["groups"]} & {"g1", "g2", "g3"}
    assert _post(base, "node_status", {})[0] == 200
    assert _post(base, "queue_ranges", {"args": ["TU"]})[0] == 200
    req = urllib.request.Request(
        base + "/metrics", headers={"Authorization": f"Bearer {TOKEN}"}
    )
    with urllib.request.urlopen(req, timeout=10) as r:
        assert r.status == 200
    # Right types still go through (an int where a float is taken).
    checker = ["PID_x", "http://127.0.0.1:1/check", "s", 3]
    code, out = _post(base, "configure_checker", {"args": checker})
    assert code == 200, out
    assert "Traceback" not in served.log.read_text()


def test_arguments_nested_too_deeply_are_refused(served):
    """Arguments nested hundreds of levels deep (once a ``RecursionError``,
    500) and a body nested 100,000 levels deep (once no answer at all, the
    connection dropped and a traceback on stderr): 400, and the server
    answers the next request."""
    base = served.base
    url = urllib.parse.urlsplit(base)

    def post_raw(body: bytes) -> tuple[int, dict]:
        conn = http.client.HTTPConnection(url.hostname, url.port, timeout=10)
        conn.request("POST", "/v1/ops/create_topic", body=body,
                     headers={"Authorization": f"Bearer {TOKEN}"})  # fmt: skip
        r = conn.getresponse()
        out = r.status, json.loads(r.read())
        conn.close()
        return out

    for levels in (40, 500, 980):
        nested = b"[" * levels + b"]" * levels
        code, out = post_raw(b'{"args": ["TD", 1, 1, 6, ' + nested + b"]}")
        assert code == 400 and "too deeply" in out["error"], (levels, code, out)
    for body in (b"[" * 100_000, b'{"args": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"):
        conn = http.client.HTTPConnection(url.hostname, url.port, timeout=10)
        conn.request("POST", "/v1/ops/node_status", body=body,
                     headers={"Authorization": f"Bearer {TOKEN}"})  # fmt: skip
        r = conn.getresponse()
        out = json.loads(r.read())
        assert r.status == 400 and "nests too deeply" in out["error"], out
        conn.close()
    assert _post(base, "node_status", {})[0] == 200
    # A string holding brackets is no nesting.
    code, out = _post(base, "get_topic", {"args": ["[" * 1000]})
    assert code == 404 and "does not exist" in out["error"], out
    text = served.log.read_text()
    assert "Traceback" not in text and "RecursionError" not in text, text[-2000:]


def test_an_internal_fault_is_500_without_its_text(tmp_path):
    """A fault inside the node (not a library error) answers 500 with no
    exception text or traceback in the body; the node's log has it."""

    def broken():
        raise RuntimeError("secret internals /etc/shadow")

    with Broker.open(str(tmp_path / "store")) as broker:

        class _Ep:
            pass

        ep = _Ep()
        ep.store, ep.broker, ep.node = broker.store, broker, None
        ep.counters = {}
        ep.writable = lambda: True
        ep.client_rows = list
        ep.batch_counters = dict
        node_ops = NodeOps(lambda: broker, broken, broken, lambda g=None: [])
        admin = AdminServer(ep, "127.0.0.1:0", TOKEN, node_ops=node_ops).start()
        try:
            base = f"http://{admin.address}"
            code, out = _post(base, "transaction_metrics", {})
            assert code == 500, out
            assert out == {"error": "internal error, see the node's log"}
            assert _post(base, "get_topic", {"args": ["nope"]})[0] == 404
        finally:
            admin.stop()


@pytest.mark.parametrize("token", [TOKEN, None])
def test_methods_not_served_answer_405_in_json(served, token):
    url = urllib.parse.urlsplit(served.base)
    for method in ("PUT", "DELETE", "PATCH", "OPTIONS", "HEAD", "BREW"):
        conn = http.client.HTTPConnection(url.hostname, url.port, timeout=10)
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        conn.request(method, "/v1/ops/node_status", body=b"{}", headers=headers)
        r = conn.getresponse()
        data = r.read()
        assert r.status == 405, (method, r.status, data)
        assert r.getheader("Allow") == "GET, POST", method
        assert r.getheader("Content-Type") == "application/json", method
        if method == "HEAD":
            assert data == b""
        else:
            assert "is not allowed" in json.loads(data)["error"], data
            assert b"<html" not in data.lower()
        conn.close()
    # What http.server answers itself (a header line too long, a request
    # line it cannot parse): JSON, never its HTML page.
    with socket.create_connection((url.hostname, url.port), timeout=10) as s:
        s.sendall(b"GET /metrics HTTP/1.1\r\nX: " + b"a" * 70_000 + b"\r\n\r\n")
        data = s.makefile("rb").read()
    head, _, body = data.partition(b"\r\n\r\n")
    assert b" 431 " in head.split(b"\r\n")[0] and b"application/json" in head, data
    assert "error" in json.loads(body)
    with socket.create_connection((url.hostname, url.port), timeout=10) as s:
        s.sendall(b"GET / HTTP/9.9\r\n\r\n")  # a version it does not speak
        data = s.makefile("rb").read()
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.0 50") and b"application/json" in head, data
    assert "error" in json.loads(body), data
    assert _post(served.base, "node_status", {})[0] == 200


def test_idle_connections_take_no_thread_of_the_node(served):
    """A hundred connections that send nothing (no token, no headers): the
    node's threads barely move (they once took 200 more, held for
    minutes) and a normal request is answered at once."""
    pid = served.proc.pid
    assert _post(served.base, "node_status", {})[0] == 200
    before = _threads(pid)
    url = urllib.parse.urlsplit(served.base)
    idle = [socket.create_connection((url.hostname, url.port)) for _ in range(100)]
    try:
        time.sleep(0.5)
        t0 = time.monotonic()
        assert _post(served.base, "node_status", {})[0] == 200
        assert time.monotonic() - t0 < 3
        assert _threads(pid) <= before + 3, (before, _threads(pid))
    finally:
        for s in idle:
            s.close()


@pytest.fixture
def quick(tmp_path):
    """The admin API in this process, with a 3 s timeout (six times the
    trickling clients' pace, for a loaded machine) and room for 8 requests at
    once (``io_timeout_s``, ``max_connections``)."""
    with admin_of_store(tmp_path / "store", TOKEN, io_timeout_s=3.0,
                        max_connections=8, max_per_address=8) as admin:  # fmt: skip
        yield admin


def _until(check, within: float = 15.0) -> bool:
    deadline = time.monotonic() + within
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def _request_threads() -> int:
    """The admin servers' request threads alive in this process."""
    return sum("process_request_thread" in t.name for t in threading.enumerate())


def _closed_by_server(s: socket.socket) -> bool:
    s.settimeout(15)
    try:
        return s.recv(100) == b""
    except OSError:
        return True  # reset: closed as well


def test_slow_clients_hold_a_thread_for_the_timeout_at_most(quick):
    """Connections that send nothing are closed after the timeout without a
    thread; ones that never finish their headers hold a thread until a read
    waits longer than the timeout; beyond ``max_connections`` at once one
    more is answered 503 at once; a body shorter than its Content-Length is
    answered 408 after the timeout; then the threads are gone."""
    base = f"http://{quick.address}"
    host, port = quick.address.rsplit(":", 1)
    address = (host, int(port))
    # The request threads of this test's server (counting every thread of
    # the process let another test's threads, ending meanwhile, hide them).
    assert _until(lambda: _request_threads() == 0)

    silent = [socket.create_connection(address) for _ in range(30)]
    slow = []
    for _ in range(8):
        s = socket.create_connection(address)
        s.sendall(b"POST /v1/ops/node_status HTTP/1.1\r\nHost: x\r\n")
        slow.append(s)
    # Eight clients sending a header line every 0.5 s (under the timeout):
    # they keep their eight threads, and a ninth request is refused.
    stop = threading.Event()

    def trickle():
        while not stop.wait(0.5):
            for s in slow:
                s.sendall(b"X-Slow: 1\r\n")

    feeder = threading.Thread(target=trickle, daemon=True)
    feeder.start()
    try:
        assert _until(lambda: _request_threads() >= 8), _request_threads()
        assert _request_threads() == 8  # none for the silent
        t0 = time.monotonic()
        code, out = _post(base, "node_status", {})
        assert code == 503 and "busy" in out["error"], (code, out)
        assert time.monotonic() - t0 < 2
    finally:
        stop.set()
        feeder.join()
    # The slow ones stop: dropped after the timeout, as the silent ones.
    for s in silent + slow:
        assert _closed_by_server(s)
        s.close()
    assert _until(lambda: _request_threads() == 0)
    assert _post(base, "node_status", {})[0] == 200

    # A body shorter than its Content-Length: 408 after the timeout.
    s = socket.create_connection(address)
    s.sendall(
        b"POST /v1/ops/node_status HTTP/1.1\r\nHost: x\r\n"
        + f"Authorization: Bearer {TOKEN}\r\n".encode()
        + b"Content-Length: 100\r\n\r\n{"
    )
    s.settimeout(15)
    t0 = time.monotonic()
    data = s.makefile("rb").read()
    s.close()
    assert time.monotonic() - t0 > 2.5
    head, _, body = data.partition(b"\r\n\r\n")
    assert b" 408 " in head.split(b"\r\n")[0], data
    assert "did not arrive" in json.loads(body)["error"]
    assert _until(lambda: _request_threads() == 0)
    assert _post(base, "node_status", {})[0] == 200


def test_a_negative_reset_is_refused_everywhere(tmp_path):
    """``to_offset`` -3 was clamped to 0 and applied through the admin API
    (the console refused it): the library refuses a negative offset or time
    for every caller, and the admin API answers its 400."""
    from broker_core.endpoint.config import EndpointConfig
    from broker_core.endpoint.server import Endpoint

    with Broker.open(str(tmp_path / "store")) as broker:
        broker.create_topic("events", 2)
        broker.send_batch([Message("events", b"e", queue_id=i % 2) for i in range(6)])
        got = broker.pull("analytics", "events", 0, 0, max_messages=3)
        broker.commit_offset("analytics", "events", 0, got.next_offset)
        for kwargs in ({"to_offset": -3}, {"to_offset": -3, "queue_id": 0},
                       {"to_ms": -1}, {"to_offset": 1.5}):  # fmt: skip
            with pytest.raises(ValidationError) as info:
                preview_reset(broker.store, "analytics", "events", **kwargs)
            assert (
                not isinstance(info.value, InvalidOffsetError)
                or kwargs.get("queue_id") is None
            )
        ep = Endpoint(broker, EndpointConfig())
        admin = AdminServer(ep, "127.0.0.1:0", TOKEN).start()
        try:
            base = f"http://{admin.address}"
            for name in ("preview_reset", "apply_reset"):
                for kwargs in ({"to_offset": -3}, {"to_ms": -5}):
                    code, out = _post(
                        base, name, {"args": ["analytics", "events"], "kwargs": kwargs}
                    )
                    assert code == 400 and "negative" in out["error"], (name, out)
            assert broker.committed_offset("analytics", "events", 0) == 3
        finally:
            admin.stop()
            ep.close()


def test_the_store_refuses_settings_of_the_wrong_type(tmp_path):
    """Whoever calls them, the store's own entry points refuse queue numbers,
    permissions and delivery attempts that are no integers."""
    with Broker.open(str(tmp_path / "store")) as broker:
        store = broker.store
        for args in (("T1", 4.5), ("T2", True), ("T3", 4, 2.0), ("T4", 4, 4, "6"),
                     ("T5", 4, 4, 6, 7)):  # fmt: skip
            with pytest.raises(ValidationError):
                store.create_topic(*args)
        store.create_topic("T", 2)
        for changes in ({"read_queue_nums": 2.5}, {"write_queue_nums": False},
                        {"perm": 6.0}):  # fmt: skip
            with pytest.raises(ValidationError):
                store.update_topic("T", **changes)
        for args in (("g", True, 2.5), ("g", True, True), ("g", 1, 3), ("g", "yes")):
            with pytest.raises(ValidationError):
                broker.put_group(*args)
        assert [t.topic_name for t in store.list_topics()].count("T") == 1
        cfg = store.get_topic("T")
        assert (cfg.read_queue_nums, cfg.write_queue_nums, cfg.perm) == (2, 2, 6)
        assert broker.list_groups() == []
        assert broker.put_group("g", True, 3).max_delivery_attempts == 3


def test_over_tls_a_client_that_sends_no_hello_stops_nobody(tmp_path):
    """The TLS handshake ran on the accepting thread: one connection that
    never sent its hello stopped every other. It runs on the request's own
    thread now, under the timeout."""
    import ssl

    from broker_core.cluster.credentials import make_credentials
    from broker_core.endpoint.config import EndpointConfig
    from broker_core.endpoint.server import Endpoint

    creds = tmp_path / "creds"
    make_credentials(creds, {"n1": ["127.0.0.1"]})
    tls = (str(creds / "hosts/n1/cert.pem"), str(creds / "hosts/n1/key.pem"))
    context = ssl.create_default_context(cafile=str(creds / "ca.pem"))
    with Broker.open(str(tmp_path / "store")) as broker:
        ep = Endpoint(broker, EndpointConfig())
        admin = AdminServer(ep, "127.0.0.1:0", TOKEN, tls=tls).start()
        host, port = admin.address.rsplit(":", 1)
        mute = [socket.create_connection((host, int(port))) for _ in range(3)]
        try:
            time.sleep(0.3)
            t0 = time.monotonic()
            status = ops(f"https://{admin.address}", context=context).node_status()
            assert status["role"] == "ASYNC_MASTER"
            assert time.monotonic() - t0 < 3
        finally:
            for s in mute:
                s.close()
            admin.stop()
            ep.close()


def test_every_operation_has_annotations_the_check_can_read():
    """``argtypes`` reads each operation's annotations (and those of the
    library functions ``list_halves`` and ``update_topic`` pass their
    keywords to): one that does not resolve would fail every call of it."""
    from broker_core.cluster import argtypes
    from broker_core.cluster.node_ops import OPERATIONS

    for name in OPERATIONS:
        fn = getattr(NodeOps, name)
        argtypes.hints(fn)
        marked = getattr(fn, "__keywords_of__", None)
        if marked is not None:
            argtypes.hints(marked[0]())
    assert argtypes.fits(3, float) and not argtypes.fits(True, int)
    assert argtypes.fits([1, 2], list[int]) and not argtypes.fits([1, "2"], list[int])
    assert argtypes.fits(None, int | None) and not argtypes.fits(1.0, int | None)
    assert argtypes.fits({"a": 1}, dict[str, int]) and argtypes.fits("x", object)


def test_one_address_cannot_take_every_request_slot(tmp_path):
    """Connections from one host that never finish their headers (before any
    token is read) hold at most ``max_per_address`` of the slots: one more
    from that host is answered 503 at once, another host is still served."""
    held = []
    with admin_of_store(tmp_path / "store", TOKEN, listen="0.0.0.0:0",
                        io_timeout_s=5.0, max_connections=8,
                        max_per_address=2) as admin:  # fmt: skip
        port = int(admin.address.rsplit(":", 1)[1])
        try:
            for _ in range(2):
                s = socket.create_connection(("127.0.0.1", port))
                s.sendall(b"POST /v1/ops/node_status HTTP/1.1\r\nHost: x\r\n")
                held.append(s)
            time.sleep(0.5)  # both have their threads
            code, out = _post(f"http://127.0.0.1:{port}", "node_status", {})
            assert code == 503 and "busy" in out["error"], (code, out)
            other = http.client.HTTPConnection(
                "127.0.0.1", port, timeout=5, source_address=("127.0.0.2", 0)
            )
            other.request("POST", "/v1/ops/node_status", body=b"{}",
                          headers={"Authorization": f"Bearer {TOKEN}"})  # fmt: skip
            assert other.getresponse().status == 200
            other.close()
        finally:
            for s in held:
                s.close()


def test_a_request_line_without_a_version_gets_a_status_line(quick):
    host, port = quick.address.rsplit(":", 1)
    s = socket.create_connection((host, int(port)), timeout=5)
    s.sendall(b"GARBAGE\r\n\r\n")
    data = s.makefile("rb").read()
    s.close()
    assert data.startswith(b"HTTP/1.0 400 "), data[:80]
    s = socket.create_connection((host, int(port)), timeout=5)
    s.sendall(b"GET /metrics HTTP/0.9\r\n\r\n")
    data = s.makefile("rb").read()
    s.close()
    assert data.startswith(b"HTTP/1.0 505 "), data[:80]
    assert b"application/json" in data.partition(b"\r\n\r\n")[0]
