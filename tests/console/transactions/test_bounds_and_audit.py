"""A page number no list reaches is the API's 404 "Invalid page." (as DRF's
own pagination answers), never the node's overflow; the index refuses such
numbers itself (400); a node that answers HTTP 500 is 502 ``node_error``, not
"unavailable"; "roll back every half matching" is audited even when the node
does not answer."""

from __future__ import annotations

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from broker_core.errors import ValidationError
from console.audit.models import AuditRecord

pytestmark = pytest.mark.django_db

HUGE = "99999999999999999999"


def _refused_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("page", [HUGE, "0", "-1", "abc", "1000001"])
def test_a_page_beyond_any_list_is_invalid_page(api_as, halves, page):
    r = api_as("viewer").get("/api/transactions/", {"page": page})
    assert r.status_code == 404
    assert r.json() == {"code": "not_found", "message": "Invalid page."}


def test_the_last_sane_page_is_an_empty_page(api_as, halves):
    r = api_as("viewer").get("/api/transactions/", {"page": "1000000"})
    assert r.status_code == 200 and r.json()["results"] == []


@pytest.mark.parametrize(
    ("url", "params"),
    [
        ("/api/delay-scheduled/", {"start": HUGE}),
        ("/api/messages/search/", {"topic": "orders", "begin_ms": HUGE}),
        ("/api/topics/orders/messages/", {"queue_id": 0, "offset": HUGE}),
    ],
)
def test_other_node_lists_refuse_numbers_beyond_the_node(api_as, halves, url, params):
    r = api_as("viewer").get(url, params)
    assert r.status_code == 400, r.content
    assert r.json()["code"] == "invalid"


@pytest.mark.parametrize("url", ["/api/topics/", "/api/audit/"])
def test_a_table_list_refuses_an_offset_beyond_the_database(api_as, halves, url):
    r = api_as("admin").get(url, {"offset": HUGE})
    assert r.status_code == 404
    assert r.json() == {"code": "not_found", "message": "Invalid page."}


def test_the_pending_page_refuses_a_page_beyond_any_list(client_as, halves):
    assert client_as("viewer").get("/transactions/", {"page": HUGE}).status_code == 404


def test_the_index_refuses_numbers_sqlite_cannot_hold(halves):
    from console.brokerlink import get_transaction_service

    svc = get_transaction_service()
    svc.list_halves(state=None)  # the index caught up
    index = svc.index
    args = (None, None, None, None, None, None, "born")
    for limit, offset in ((50, 10**20), (10**20, 0), (-1, 0), (50, -1)):
        with pytest.raises(ValidationError):
            index.list_halves(*args, limit, offset, True)
    with pytest.raises(ValidationError):
        index.list_halves(None, None, None, None, -(10**20), None, "born", 5, 0, True)
    with pytest.raises(ValidationError):
        index.get_row(10**20)
    with pytest.raises(ValidationError):
        index.events(10**20)
    with pytest.raises(ValidationError):
        next(index.iter_due(10**20))
    rows, total, _ = index.list_halves(*args, 50, 0, True)
    assert len(rows) == total == 7


def test_through_the_admin_api_a_huge_page_is_the_node_s_400(
    settings, broker, halves, tmp_path
):
    """The node itself refuses it (400 ``invalid``, a library error), so a
    console before the bound still gets a caller's error, not a node 500."""
    from console.brokerlink import node_ops
    from tests.console.conftest import _admin_api

    with _admin_api(settings, broker, tmp_path):
        with pytest.raises(ValidationError):
            node_ops().list_halves(page=10**19, page_size=50)


@pytest.fixture
def failing_node(settings, broker, tmp_path):
    """A node whose admin API answers every operation HTTP 500."""

    class Broken(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            self.send_error(500, "boom")

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Broken)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    token = tmp_path / "token"
    token.write_text("t0ken")
    url = f"http://127.0.0.1:{server.server_port}"
    settings.BROKER_ADMIN_URL = url
    settings.BROKER_NODE = "broker-a"
    settings.CLUSTER_ADMIN_TOKEN_FILE = str(token)
    yield url
    server.shutdown()
    server.server_close()


def test_a_node_that_answers_500_is_502_node_error(api_as, failing_node):
    r = api_as("viewer").get("/api/transactions/")
    assert r.status_code == 502
    assert r.json() == {
        "code": "node_error",
        "message": f"node broker-a ({failing_node}) failed the request: see its log",
    }
    tid = "0A0000000000000000000000"
    r = api_as("operator").post(
        f"/api/transactions/{tid}/rollback/", {"reason": "x" * 5}, format="json"
    )
    assert r.status_code == 502 and r.json()["code"] == "node_error"
    (record,) = AuditRecord.objects.all()
    assert record.status == "failed" and record.object_id == f"broker-a/{tid}"


def test_a_page_whose_node_answers_500_says_the_node_failed(client_as, failing_node):
    r = client_as("viewer").get("/transactions/")
    assert r.status_code == 502
    text = r.content.decode()
    assert "The node failed the request" in text and "did not answer" not in text
    assert "see its log" in text


def test_a_node_that_refuses_stays_503_node_unavailable(
    api_as, broker, settings, tmp_path
):
    token = tmp_path / "token"
    token.write_text("t0ken")
    port = _refused_port()
    settings.BROKER_ADMIN_URL = f"http://127.0.0.1:{port}"
    settings.CLUSTER_ADMIN_TOKEN_FILE = str(token)
    r = api_as("viewer").get("/api/transactions/")
    assert r.status_code == 503 and r.json() == {
        "code": "node_unavailable",
        "message": f"node local (http://127.0.0.1:{port}) did not answer: "
        "connection refused",
    }


def _matching(client, filters: dict, follow: bool = True):
    return client.post(
        "/transactions/bulk-rollback/",
        {"all_matching": "on", "filters": json.dumps(filters), "reason": "node gone"},
        follow=follow,
    )


def test_rolling_back_everything_matching_with_the_node_away_is_audited(
    client_as, halves, settings, tmp_path
):
    token = tmp_path / "token"
    token.write_text("t0ken")
    settings.BROKER_ADMIN_URL = f"http://127.0.0.1:{_refused_port()}"
    settings.CLUSTER_ADMIN_TOKEN_FILE = str(token)
    from django.contrib.messages import get_messages

    r = _matching(client_as("operator"), {"min_checks": "5"}, follow=False)
    assert r.status_code == 302  # back to the list, which says the node is away
    (said,) = [str(m) for m in get_messages(r.wsgi_request)]
    assert said.startswith("Nothing rolled back: node local (http://127.0.0.1:")
    (record,) = AuditRecord.objects.all()
    assert record.action == "transaction.rollback_matching"
    assert record.object_id == "local/*" and record.status == "failed"
    assert "connection refused" in record.message
    assert record.reason == "node gone"


def test_rolling_back_everything_matching_records_the_match(client_as, halves):
    r = _matching(client_as("operator"), {"min_checks": "5"})
    assert b"Rolled back 2" in r.content
    got = sorted((a.action, a.status) for a in AuditRecord.objects.all())
    assert got == [
        ("transaction.rollback", "success"),
        ("transaction.rollback", "success"),
        ("transaction.rollback_matching", "success"),
    ]
    match = AuditRecord.objects.get(action="transaction.rollback_matching")
    assert match.after == {"matched": 2} and match.object_id == "local/*"
    assert match.before["filters"]["min_checks"] == 5
