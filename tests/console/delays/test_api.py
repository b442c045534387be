"""``/api/delay-levels/``, ``/api/delay-scheduled/`` and cancel."""

from __future__ import annotations

import pytest

from broker_core import Message
from console.brokerlink import get_delay_service

pytestmark = pytest.mark.django_db


@pytest.fixture
def msg_id(broker):
    return get_delay_service().send_delayed(Message("t", b"x"), level=5).msg_id


@pytest.mark.parametrize("role", ["viewer", "operator", "admin"])
def test_levels(api_as, msg_id, role) -> None:
    data = api_as(role).get("/api/delay-levels/").json()
    assert len(data["levels"]) == 18
    assert data["levels"][4]["backlog"] == 1 and data["levels"][4]["delay_ms"] == 60_000
    rows = api_as(role).get("/api/delay-scheduled/", {"level": 5}).json()["results"]
    assert [r["msg_id"] for r in rows] == [msg_id]


def test_cancel(api_as, msg_id) -> None:
    url = f"/api/delay-scheduled/{msg_id}/cancel/"
    assert (
        api_as("viewer").post(url, {"reason": "nope"}, format="json").status_code == 403
    )
    assert api_as("operator").post(url, {}, format="json").status_code == 400
    r = api_as("operator").post(url, {"reason": "customer cancelled"}, format="json")
    assert r.status_code == 200 and r.json()["level"] == 5
    again = api_as("operator").post(url, {"reason": "again"}, format="json")
    # Recalled already: a conflict, as the node's admin API answers it too.
    assert again.status_code == 409 and again.json()["code"] == "recall_failed"
    unknown = api_as("operator").post(
        "/api/delay-scheduled/7F0000010000000000000000DEADBEEF/cancel/",
        {"reason": "no such message"},
        format="json",
    )
    assert unknown.status_code == 404, unknown.json()
    assert api_as("none").get("/api/delay-levels/").status_code == 403
