"""Message pages: bodies only for operators and admins, shown inert; search; resend."""

from __future__ import annotations

import pytest

from broker_core import Message
from console.audit.models import AuditRecord

pytestmark = pytest.mark.django_db

EVIL = b'<script>window.pwned=1</script><img src=x onerror="window.pwned=2">'


@pytest.fixture
def msgs(broker):
    broker.create_topic("shop", 2)
    out = {
        "json": broker.send(
            Message(
                "shop",
                b'{"order": 7, "total": 12.5}',
                tags="paid",
                keys="order-7",
                properties={"amount": "12"},
            )
        ),
        "evil": broker.send(
            Message("shop", EVIL, tags="new", keys="evil", properties={"amount": "3"})
        ),
        "binary": broker.send(Message("shop", bytes(range(256)), tags="bin")),
    }
    return {k: r.msg_id for k, r in out.items()}


def test_viewer_sees_no_body(client_as, msgs) -> None:
    body = client_as("viewer").get(f"/messages/{msgs['json']}/").content.decode()
    assert "order-7" in body and "amount" in body
    assert "total" not in body and "12.5" not in body
    assert 'data-testid="body-hidden"' in body
    assert "Resend" not in body


@pytest.mark.parametrize("role", ["operator", "admin"])
def test_operator_sees_body_as_json_text_and_hex(client_as, msgs, role) -> None:
    body = client_as(role).get(f"/messages/{msgs['json']}/").content.decode()
    assert 'data-testid="body-json"' in body and "&quot;total&quot;: 12.5" in body
    assert "Resend" in body


def test_html_body_is_escaped(client_as, msgs) -> None:
    body = client_as("operator").get(f"/messages/{msgs['evil']}/").content.decode()
    assert "<script>window.pwned" not in body and "<img src=x" not in body
    assert "&lt;script&gt;window.pwned=1&lt;/script&gt;" in body


def test_binary_body_defaults_to_hex(client_as, msgs) -> None:
    body = client_as("operator").get(f"/messages/{msgs['binary']}/").content.decode()
    assert "00000000  00 01 02 03" in body and 'data-default-view="hex"' in body


def test_unknown_message_is_404(client_as, broker) -> None:
    assert client_as("viewer").get("/messages/NOPE/").status_code == 404


@pytest.mark.parametrize(
    "query,expected",
    [
        ({"topic": "shop", "key": "order-7"}, {"json"}),
        ({"topic": "shop", "tag": "paid || new"}, {"json", "evil"}),
        ({"topic": "shop", "sql": "amount > 5"}, {"json"}),
        ({"topic": "shop", "tag": "new", "sql": "amount < 5"}, {"evil"}),
    ],
)
def test_search(client_as, msgs, query, expected) -> None:
    body = client_as("viewer").get("/messages/", query).content.decode()
    for name, msg_id in msgs.items():
        assert (msg_id in body) == (name in expected), name


def test_search_by_id_and_bad_sql(client_as, msgs) -> None:
    c = client_as("viewer")
    assert (
        msgs["evil"] in c.get("/messages/", {"msg_id": msgs["evil"]}).content.decode()
    )
    body = c.get("/messages/", {"topic": "shop", "sql": "amount >"}).content.decode()
    assert 'role="alert"' in body


def test_resend_to_group(client_as, msgs, broker) -> None:
    url = f"/messages/{msgs['json']}/resend/"
    assert (
        client_as("viewer")
        .post(url, {"group": "billing", "reason": "replay"})
        .status_code
        == 403
    )
    r = client_as("operator").post(
        url, {"group": "billing", "reason": "replay lost order"}
    )
    assert r.status_code == 302
    copy = broker.store.read_message(
        broker.store.get_queue_units("%RETRY%billing", 0, 0, 1)[0][0]
    )
    assert copy.body == b'{"order": 7, "total": 12.5}'
    assert copy.properties["RETRY_TOPIC"] == "shop"
    rec = AuditRecord.objects.get()
    assert (rec.action, rec.object_id, rec.reason) == (
        "message.resend",
        f"local/{msgs['json']}",
        "replay lost order",
    )


def test_message_page_shows_each_groups_consume_state(client_as, broker) -> None:
    """One message, four groups reading its queue: one past it, one behind it,
    one whose copy sits in its dead-letter topic, one resent through its retry
    topic; each row says so, and a group not reading the queue has none."""
    broker.create_topic("ledger", 1)
    ids = [broker.send(Message("ledger", b"m%d" % i)).msg_id for i in range(4)]
    target = broker.get_message(ids[2])
    assert target.queue_offset == 2
    broker.commit_offset("done", "ledger", 0, 3)
    broker.commit_offset("behind", "ledger", 0, 1)
    broker.commit_offset("dead", "ledger", 0, 3)
    broker.commit_offset("resent", "ledger", 0, 3)
    broker.create_topic("%DLQ%dead", 1)
    inner = target.to_inner()
    inner.topic, inner.queue_id = "%DLQ%dead", 0
    broker.store.put_inner(inner)
    r = client_as("operator").post(
        f"/messages/{ids[2]}/resend/", {"group": "resent", "reason": "replay"}
    )
    assert r.status_code == 302
    page = client_as("viewer").get(f"/messages/{ids[2]}/")
    assert page.status_code == 200
    rows = {c["group"]: c for c in page.context["consumers"]}
    assert {g: c["state"] for g, c in rows.items()} == {
        "done": "consumed",
        "behind": "pending",
        "dead": "dead_lettered",
        "resent": "consumed",
    }
    # A pop consumer holding it unacknowledged, its group having committed
    # nothing yet: not acknowledged yet (it read "never read", helper-14).
    import json
    import time

    (broker.store.root / "clients.json").write_text(json.dumps({"clients": [{
        "client_id": "c1", "client_type": "SIMPLE_CONSUMER", "group": "popper",
        "topics": ["ledger"], "online": True, "last_heartbeat": time.time(),
    }]}))  # fmt: skip
    page = client_as("viewer").get(f"/messages/{ids[2]}/")
    rows = {c["group"]: c for c in page.context["consumers"]}
    assert rows["popper"]["state"] == "pending"
    assert rows["popper"]["committed_offset"] == -1
    assert rows["behind"]["ahead"] == 1 and rows["resent"]["retried"]
    html = page.content.decode()
    assert 'data-group="dead" data-state="dead_lettered"' in html
    assert "/consumer-groups/dead/dead-letters/" in html
    assert "redelivered through its retry topic" in html
    # The dead letter resent: "resent" until the group acknowledges the copy
    # in its retry topic, then consumed (it read "dead-lettered" for good).
    r = client_as("operator").post(
        f"/messages/{ids[2]}/resend/", {"group": "dead", "reason": "replay"}
    )
    assert r.status_code == 302
    page = client_as("viewer").get(f"/messages/{ids[2]}/")
    rows = {c["group"]: c for c in page.context["consumers"]}
    assert rows["dead"]["state"] == "resent"
    assert "resent from the dead-letter queue" in page.content.decode()
    broker.commit_offset("dead", "%RETRY%dead", 0, 1)
    page = client_as("viewer").get(f"/messages/{ids[2]}/")
    rows = {c["group"]: c for c in page.context["consumers"]}
    assert rows["dead"]["state"] == "consumed"
    # A message nobody reads: no group rows.
    broker.create_topic("quiet", 1)
    lone = broker.send(Message("quiet", b"x")).msg_id
    page = client_as("viewer").get(f"/messages/{lone}/")
    assert 'data-testid="no-consumers"' in page.content.decode()
