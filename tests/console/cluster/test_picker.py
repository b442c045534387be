"""The single-store pages on a cluster: the operator picks a node in their
banner, and the pages show (and change) that node's store through its admin
API; a node that does not answer is a 503 page naming it, not a server error."""

from __future__ import annotations

import re
import socket

import pytest

from broker_core import Message
from broker_core.transaction import TransactionService

pytestmark = [pytest.mark.services, pytest.mark.django_db]


def _pick(client, node: str, next_url: str = "/topics/"):
    return client.post("/cluster/pick/", {"node": node, "next": next_url})


def test_pages_show_and_change_the_picked_node(nodes, client_as, settings, broker):
    a = nodes.start("broker-a")
    b = nodes.start("broker-b")
    a.create_topic("only-on-a", 1, 1)
    b.create_topic("only-on-b", 2, 2)
    tx = TransactionService(b)
    tid = tx.send_half("PID_b", Message("only-on-b", b"x", keys="k")).transaction_id
    tx.close()
    broker.create_topic("console-own", 1, 1)
    viewer = client_as("viewer")
    operator = client_as("operator")

    body = viewer.get("/topics/").content.decode()
    assert "console-own" in body and "only-on-b" not in body
    picker = body[body.index('data-testid="node-picker"') :]
    picker = picker[: picker.index("</select>")]
    assert re.findall(r'<option value="([^"]*)"', picker) == [
        "",
        "broker-a",
        "broker-b",
    ]

    r = _pick(viewer, "broker-b", "/topics/?sort=name")
    assert r.status_code == 302 and r["Location"] == "/topics/?sort=name"
    body = viewer.get("/topics/").content.decode()
    assert "only-on-b" in body and "console-own" not in body
    assert 'data-testid="scope-node">broker-b</strong> (through its admin API)' in body
    assert f"/transactions/{tid}/" in viewer.get("/transactions/").content.decode()

    # A write goes to the picked node: a rollback lands in broker-b's log.
    _pick(operator, "broker-b")
    r = operator.post(f"/transactions/{tid}/rollback/", {"reason": "stuck"})
    assert r.status_code == 302
    tx = TransactionService(b)
    assert tx.get_half(tid).info.state.value == "ROLLED_BACK"
    tx.close()

    # Back to the console's own store; a name that is not a live node is refused.
    _pick(viewer, "")
    assert "console-own" in viewer.get("/topics/").content.decode()
    _pick(viewer, "broker-zz")
    assert "console-own" in viewer.get("/topics/").content.decode()
    r = _pick(viewer, "broker-a", "https://evil.example/")
    assert r["Location"] == "/"


def test_a_picked_node_that_does_not_answer_is_named(nodes, client_as, broker):
    with socket.socket() as s:  # nothing listens there afterwards
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    nodes.register("broker-gone", f"http://127.0.0.1:{port}")
    viewer = client_as("viewer")
    _pick(viewer, "broker-gone")
    r = viewer.get("/transactions/")
    body = r.content.decode()
    assert r.status_code == 503
    assert 'data-testid="node-unavailable"' in body
    assert (
        f"node broker-gone (http://127.0.0.1:{port}) did not answer: "
        "connection refused" in body
    )
    assert "urlopen" not in body and "Errno" not in body
    assert 'data-testid="node-picker"' in body  # to pick another
    r = client_as("viewer").get("/api/transactions/")
    assert r.status_code == 200  # the API's node is per request, not the session's


def test_the_api_takes_the_node_from_a_header(nodes, api_as, broker):
    b = nodes.start("broker-b")
    b.create_topic("only-on-b", 1, 1)
    broker.create_topic("console-own", 1, 1)
    api = api_as("viewer")
    names = [t["name"] for t in api.get("/api/topics/").json()["results"]]
    assert "console-own" in names and "only-on-b" not in names
    r = api.get("/api/topics/", HTTP_X_BROKER_NODE="broker-b")
    names = [t["name"] for t in r.json()["results"]]
    assert "only-on-b" in names and "console-own" not in names
    r = api.get("/api/topics/", HTTP_X_BROKER_NODE="broker-zz")
    cluster = nodes.registry.cluster
    assert r.status_code == 404 and r.json() == {
        "code": "node_not_found",
        "message": f"node broker-zz is not a live node in cluster {cluster}",
    }


def test_a_node_that_hangs_costs_a_read_its_timeout_and_a_write_says_so(
    nodes, client_as, settings, broker
):
    import time

    settings.CLUSTER_ADMIN_TIMEOUT_S = 0.5
    settings.CLUSTER_ADMIN_WRITE_TIMEOUT_S = 1.0
    nodes.silent("broker-hung")
    viewer, operator = client_as("viewer"), client_as("operator")
    _pick(viewer, "broker-hung")
    t = time.monotonic()
    r = viewer.get("/transactions/")
    assert r.status_code == 503 and time.monotonic() - t < 5
    assert "no answer within 0.5 s" in r.content.decode()
    _pick(operator, "broker-hung")
    r = operator.post(
        "/transactions/" + "A" * 32 + "/rollback/", {"reason": "stuck"}, follow=True
    )
    assert "may still carry it out" in r.content.decode()
