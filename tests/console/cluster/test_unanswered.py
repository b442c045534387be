"""One wording and one status for a node that cannot be asked, wherever it is
asked (the API's ``X-Broker-Node``, a picked node's pages, the Cluster page,
the node API): a live node that does not answer is 503 ``node_unavailable``
"node X (url) did not answer: <short reason>"; a name that is no live node is
404 ``node_not_found`` "node X is not a live node in cluster C". Real nodes,
real sockets, a real registry."""

from __future__ import annotations

import socket

import pytest

pytestmark = [pytest.mark.services, pytest.mark.django_db]


def _refused_port() -> int:
    with socket.socket() as s:  # nothing listens there afterwards
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_node_that_refuses_is_worded_once_everywhere(
    nodes, api_as, client_as, settings, broker
):
    port = _refused_port()
    nodes.register("broker-a", f"http://127.0.0.1:{port}", role="SLAVE", broker_id=1)
    nodes.start("broker-a")
    said = (
        f"node broker-a:1 (http://127.0.0.1:{port}) did not answer: connection refused"
    )

    r = api_as("viewer").get("/api/transactions/", HTTP_X_BROKER_NODE="broker-a:1")
    assert r.status_code == 503
    assert r.json() == {"code": "node_unavailable", "message": said}

    viewer = client_as("viewer")
    viewer.post("/cluster/pick/", {"node": "broker-a:1", "next": "/"})
    r = viewer.get("/transactions/")
    assert r.status_code == 503
    body = r.content.decode()
    assert f'data-testid="node-unavailable-reason">{said}</p>' in body
    assert "urlopen" not in body and "Errno" not in body

    body = viewer.get("/cluster/").content.decode()
    assert said in body and "urlopen" not in body
    one = api_as("viewer").get("/api/cluster/nodes/broker-a:1/")
    # The node page's shape: 200, the node named with why it did not answer.
    assert one.status_code == 200
    assert one.json()["node"]["error"] == said and one.json()["errors"] == [said]


def test_a_node_that_hangs_says_so_in_the_same_words(nodes, api_as, settings, broker):
    settings.CLUSTER_ADMIN_TIMEOUT_S = 0.5
    silent = nodes.silent("broker-h")
    r = api_as("viewer").get("/api/delay-levels/", HTTP_X_BROKER_NODE="broker-h")
    assert r.status_code == 503 and r.json() == {
        "code": "node_unavailable",
        "message": f"node broker-h (http://127.0.0.1:{silent.port}) did not "
        "answer: no answer within 0.5 s",
    }


def test_tls_to_a_plain_admin_api_is_a_short_phrase(nodes, api_as, broker):
    nodes.start("broker-p")
    (plain,) = [n.admin for n in nodes.registry.nodes() if n.name == "broker-p"]
    tls = plain.replace("http://", "https://")
    nodes.register("broker-t", tls)
    r = api_as("viewer").get("/api/topics/", HTTP_X_BROKER_NODE="broker-t")
    assert r.status_code == 503 and r.json() == {
        "code": "node_unavailable",
        "message": f"node broker-t ({tls}) did not answer: the TLS handshake failed",
    }


def test_a_node_that_is_not_live_is_404_node_not_found_everywhere(
    nodes, api_as, client_as, settings, broker
):
    nodes.start("broker-a")
    nodes.start("broker-a", role="SLAVE", broker_id=1)
    viewer = client_as("viewer")
    viewer.post("/cluster/pick/", {"node": "broker-a:1", "next": "/"})
    # broker-a:1 stops heartbeating: its key expires (it stays in the set).
    nodes.registry.redis.delete(f"{nodes.registry.prefix}:node:broker-a:1")
    assert nodes.registry.find("broker-a", 1) is None
    said = f"node broker-a:1 is not a live node in cluster {settings.BROKER_CLUSTER}"
    expected = {"code": "node_not_found", "message": said}

    api = api_as("viewer")
    r = api.get("/api/topics/", HTTP_X_BROKER_NODE="broker-a:1")
    assert (r.status_code, r.json()) == (404, expected)
    r = api.get("/api/cluster/nodes/broker-a:1/")
    assert (r.status_code, r.json()) == (404, expected)
    r = viewer.get("/cluster/nodes/broker-a:1/")
    assert r.status_code == 404 and said in r.content.decode()
    r = viewer.get("/topics/")  # the picked node is gone
    assert r.status_code == 404
    assert f'data-testid="node-unavailable-reason">{said}</p>' in r.content.decode()
