"""``/api/messages/``: search, detail (bodies for operators), resend."""

from __future__ import annotations

import pytest

from broker_core import Message
from console.audit.models import AuditRecord

pytestmark = pytest.mark.django_db


@pytest.fixture
def sent(broker):
    broker.create_topic("shop", 1)
    a = broker.send(
        Message("shop", b"alpha", tags="x", keys="k1", properties={"n": "1"})
    )
    b = broker.send(
        Message("shop", b"beta", tags="y", keys="k2", properties={"n": "9"})
    )
    return a.msg_id, b.msg_id


@pytest.mark.parametrize(
    "role,bodies", [("viewer", False), ("operator", True), ("admin", True)]
)
def test_detail_bodies_by_role(api_as, sent, role, bodies) -> None:
    data = api_as(role).get(f"/api/messages/{sent[0]}/").json()
    assert data["keys"] == "k1"
    assert ("body_text" in data) == bodies
    if bodies:
        assert data["body_text"] == "alpha"


def test_search(api_as, sent) -> None:
    c = api_as("viewer")
    assert [
        m["msg_id"]
        for m in c.get("/api/messages/search/", {"topic": "shop"}).json()["results"]
    ] == [sent[1], sent[0]]
    assert [
        m["msg_id"]
        for m in c.get(
            "/api/messages/search/", {"topic": "shop", "sql": "n > 5"}
        ).json()["results"]
    ] == [sent[1]]
    assert [
        m["msg_id"]
        for m in c.get("/api/messages/search/", {"topic": "shop", "key": "k1"}).json()[
            "results"
        ]
    ] == [sent[0]]
    r = c.get("/api/messages/search/", {"topic": "shop", "sql": "n >"})
    assert r.status_code == 400 and r.json()["code"] == "filter_syntax"
    assert c.get("/api/messages/search/").status_code == 400
    assert c.get("/api/messages/NOPE/").status_code == 404


def test_resend(api_as, sent) -> None:
    url = f"/api/messages/{sent[0]}/resend/"
    assert (
        api_as("viewer")
        .post(url, {"group": "g", "reason": "again"}, format="json")
        .status_code
        == 403
    )
    assert (
        api_as("operator").post(url, {"group": "g"}, format="json").status_code == 400
    )
    r = api_as("operator").post(url, {"group": "g", "reason": "again"}, format="json")
    assert r.status_code == 201 and r.json()["retry_topic"] == "%RETRY%g"
    assert AuditRecord.objects.get().action == "message.resend"


def test_a_resend_of_a_message_the_node_cannot_find_is_audited_as_failed(
    api_as, sent
) -> None:
    r = api_as("operator").post(
        "/api/messages/0A0B0C0D00002A9F0000000000000000/resend/",
        {"group": "g", "reason": "again"},
        format="json",
    )
    assert r.status_code == 404
    rec = AuditRecord.objects.get()
    assert (rec.action, rec.status) == ("message.resend", AuditRecord.Status.FAILED)
    assert rec.object_id.endswith("/0A0B0C0D00002A9F0000000000000000")
