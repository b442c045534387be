"""The console over a node's admin API (``BROKER_ADMIN_URL``): a real
``serve --admin-listen`` process owns the store, and the console, whose own
``BROKER_STORE_DIR`` is an empty directory elsewhere, shows and changes that
node's store through ``POST /v1/ops/<name>`` alone."""

from __future__ import annotations

import json
import secrets
import socket
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from broker_core import Broker, Message
from broker_core.cluster import opscodec
from broker_core.cluster.node_ops import NodeUnavailableError
from broker_core.errors import FilterSyntaxError, UnknownTransactionError
from broker_core.transaction import TransactionService
from tests.endpoint_server import start_server, stop_server
from tests.support import free_port

pytestmark = [pytest.mark.django_db, pytest.mark.slow]


@pytest.fixture
def node(tmp_path: Path, settings):
    store = tmp_path / "node-store"
    token = secrets.token_urlsafe(24)
    token_file = tmp_path / "admin_token"
    token_file.write_text(token)
    admin_port = free_port()
    proc = start_server(
        store,
        free_port(),
        tmp_path / "serve.log",
        (
            "--admin-listen", f"127.0.0.1:{admin_port}",
            "--admin-token-file", str(token_file),
        ),
    )  # fmt: skip
    end = time.time() + 20
    while True:
        try:
            socket.create_connection(("127.0.0.1", admin_port), 0.2).close()
            break
        except OSError:
            assert time.time() < end, "the admin API did not start"
            time.sleep(0.1)
    from console.brokerlink import close_broker

    close_broker()
    elsewhere = tmp_path / "console-host"
    settings.BROKER_STORE_DIR = elsewhere
    settings.BROKER_ADMIN_URL = f"http://127.0.0.1:{admin_port}"
    settings.CLUSTER_ADMIN_TOKEN_FILE = str(token_file)
    yield {"store": store, "url": settings.BROKER_ADMIN_URL, "token": token}
    close_broker()
    assert stop_server(proc) == 0
    assert not elsewhere.exists(), "the console opened a store of its own"
    assert "Traceback" not in (tmp_path / "serve.log").read_text()


def test_the_console_manages_the_node_through_its_admin_api(
    node, api_as, client_as
) -> None:
    admin = api_as("admin")
    r = admin.post(
        "/api/topics/",
        {"name": "orders", "read_queue_nums": 2, "write_queue_nums": 2, "reason": "t"},
        format="json",
    )
    assert r.status_code == 201, r.content
    # A producer of the node's (another process over its store) sends a
    # message and a half; the console sees both through the node.
    with Broker.open(node["store"]) as b:
        sent = b.send(Message("orders", b"hello", tags="a", keys="k1"))
        tx = TransactionService(b)
        half = tx.send_half("PID_orders", Message("orders", b"half", keys="tx-1"))
        tx.close()
    r = admin.get("/api/topics/")
    assert "orders" in [t["name"] for t in r.json()["results"]], r.json()
    r = admin.get(f"/api/messages/{sent.msg_id}/")
    assert r.status_code == 200 and r.json()["topic"] == "orders"
    r = admin.get("/api/transactions/?state=PENDING")
    assert [h["id"] for h in r.json()["results"]] == [half.transaction_id]
    r = admin.post(
        f"/api/transactions/{half.transaction_id}/commit/",
        {"reason": "paid", "confirm": "COMMIT"},
        format="json",
    )
    assert r.status_code == 200 and r.json()["state"] == "COMMITTED"
    # The node wrote the outcome to its log, with the operator's name.
    with Broker.open(node["store"]) as b:
        tx = TransactionService(b)
        info = tx.get_half(half.transaction_id).info
        tx.close()
    assert info.state.value == "COMMITTED" and info.operator == "admin"
    # A library error on the node is the same error here.
    r = admin.post(
        f"/api/transactions/{half.transaction_id}/rollback/",
        {"reason": "late"},
        format="json",
    )
    assert r.status_code == 409 and r.json()["code"] == "transaction_conflict"
    r = admin.get("/api/transactions/DEADBEEF/")
    assert r.status_code == 404
    # The health check asks the node for its store.
    health = client_as("admin").get("/healthz").json()  # details: signed in
    assert health["components"]["store"]["path"] == str(node["store"])


def test_errors_cross_as_the_library_s_own(node) -> None:
    from console.brokerlink import node_ops

    ops = node_ops()
    with pytest.raises(UnknownTransactionError):
        ops.get_half("0" * 32)
    from broker_core.search import MessageQuery

    with Broker.open(node["store"]) as b:
        b.create_topic("t", 1, 1)
    with pytest.raises(FilterSyntaxError) as err:
        ops.search_messages(MessageQuery(topic="t", sql="a = = 1"), 10, None, 1000)
    assert err.value.position >= 0


def test_the_admin_api_refuses_what_is_not_an_operation(node) -> None:
    def post(path: str, body: object, token: str | None = node["token"]) -> tuple:
        req = urllib.request.Request(
            node["url"] + path, data=json.dumps(body).encode(), method="POST"
        )
        if token:
            req.add_header("Authorization", f"Bearer {token}")
        try:
            with urllib.request.urlopen(req, timeout=5) as resp:
                return resp.status, json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read())

    assert post("/v1/ops/list_halves", {}, token=None)[0] == 401
    assert post("/v1/ops/list_halves", {}, token="wrong")[0] == 401
    code, body = post("/v1/ops/close", {})
    assert code == 404 and "close" in body["error"]
    code, body = post("/v1/ops/get_half", {"args": []})
    assert code == 400 and "get_half" in body["error"]
    # Only the library's own types are built from a request.
    code, body = post(
        "/v1/ops/search_messages",
        {"args": [{"__t": "subprocess.Popen", "f": {}}, 1, None, 1]},
    )
    assert code == 400 and "subprocess.Popen" in body["error"]
    code, body = post("/v1/ops/list_halves", {"kwargs": {"page_size": 1}})
    assert code == 200 and opscodec.decode(body["result"]).items == []


def test_a_wrong_token_is_an_error_the_pages_show(node, settings, client_as) -> None:
    Path(settings.CLUSTER_ADMIN_TOKEN_FILE).write_text("not-the-token")
    from console.brokerlink import node_ops

    with pytest.raises(NodeUnavailableError, match="401"):
        node_ops().list_halves()
    page = client_as("viewer").get("/healthz")
    assert page.json()["components"]["store"]["status"] == "down"
