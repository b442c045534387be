"""A topic's edit, delete and test send are audited exactly once whatever
becomes of them: a topic the node does not have (404) and a node that does
not answer (503) leave one FAILED record each, through the API and the pages
(the topic used to be looked up before the audited action began)."""

from __future__ import annotations

import socket

import pytest

from console.audit.models import AuditRecord

pytestmark = pytest.mark.django_db

API_ACTIONS = [
    ("patch", "/api/topics/{}/", {"perm": 4, "reason": "tidy up"}, "topic.update"),
    ("delete", "/api/topics/{}/", {"reason": "gone now"}, "topic.delete"),
    ("post", "/api/topics/{}/send/", {"body": "hi"}, "message.send_test"),
]


def _refused_port() -> int:
    with socket.socket() as s:  # nothing listens there afterwards
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def node_away(broker, settings, tmp_path):
    """The console's node (``BROKER_ADMIN_URL``) refuses every connection."""
    token = tmp_path / "token"
    token.write_text("t0ken")
    settings.BROKER_ADMIN_URL = f"http://127.0.0.1:{_refused_port()}"
    settings.CLUSTER_ADMIN_TOKEN_FILE = str(token)


def _one_failed(action: str, object_id: str, says: str) -> AuditRecord:
    records = list(AuditRecord.objects.all())
    assert len(records) == 1, [(r.action, r.object_id, r.status) for r in records]
    (record,) = records
    assert record.action == action and record.object_id == object_id
    assert record.status == AuditRecord.Status.FAILED
    assert says in record.message
    return record


@pytest.mark.parametrize(("method", "url", "data", "action"), API_ACTIONS)
def test_an_unknown_topic_is_a_failed_record(api_as, broker, method, url, data, action):
    r = getattr(api_as("admin"), method)(url.format("nope"), data, format="json")
    assert r.status_code == 404 and r.json()["code"] == "topic_not_found"
    _one_failed(action, "local/nope", "TopicNotFoundError")


@pytest.mark.parametrize(("method", "url", "data", "action"), API_ACTIONS)
def test_a_node_away_is_a_failed_record(api_as, node_away, method, url, data, action):
    r = getattr(api_as("admin"), method)(url.format("orders"), data, format="json")
    assert r.status_code == 503 and r.json()["code"] == "node_unavailable"
    _one_failed(action, "local/orders", "connection refused")


def test_a_known_topic_is_one_success_record_each(api_as, broker):
    broker.create_topic("orders", 2)
    c = api_as("admin")
    assert (
        c.post("/api/topics/orders/send/", {"body": "x"}, format="json").status_code
        == 201
    )
    r = c.patch(
        "/api/topics/orders/", {"perm": 4, "reason": "read only"}, format="json"
    )
    assert r.status_code == 200 and r.json()["perm"] == 4
    r = c.delete("/api/topics/orders/", {"reason": "gone now"}, format="json")
    assert r.status_code == 204
    got = [
        (a.action, a.object_id, a.status) for a in AuditRecord.objects.order_by("id")
    ]
    assert got == [
        ("message.send_test", "local/orders", "success"),
        ("topic.update", "local/orders", "success"),
        ("topic.delete", "local/orders", "success"),
    ]


PAGE_ACTIONS = [
    ("/topics/{}/edit/", {"name": "{}", "read_queue_nums": 1, "write_queue_nums": 1,
                          "perm": 6, "message_type": "NORMAL", "reason": "tidy"},
     "topic.update"),
    ("/topics/{}/delete/", {"confirm": "{}", "reason": "gone now"}, "topic.delete"),
    ("/topics/{}/send/", {"body": "hi"}, "message.send_test"),
]  # fmt: skip


def _fill(data: dict, name: str) -> dict:
    return {k: v.format(name) if isinstance(v, str) else v for k, v in data.items()}


@pytest.mark.parametrize(("url", "data", "action"), PAGE_ACTIONS)
def test_the_pages_audit_an_unknown_topic(client_as, broker, url, data, action):
    r = client_as("admin").post(url.format("nope"), _fill(data, "nope"))
    assert r.status_code == 404
    _one_failed(action, "local/nope", "does not exist")


@pytest.mark.parametrize(("url", "data", "action"), PAGE_ACTIONS)
def test_the_pages_audit_a_node_away(client_as, node_away, url, data, action):
    r = client_as("admin").post(url.format("orders"), _fill(data, "orders"))
    assert r.status_code == 503
    _one_failed(action, "local/orders", "connection refused")
