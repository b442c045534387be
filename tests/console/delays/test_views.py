"""Delay queue pages: levels and timers for every role, cancel for operators."""

from __future__ import annotations

import time

import pytest

from broker_core import Message
from console.audit.models import AuditRecord
from console.brokerlink import get_delay_service

pytestmark = pytest.mark.django_db


@pytest.fixture
def scheduled(broker):
    svc = get_delay_service()
    ids = [
        svc.send_delayed(
            Message("orders", b"later %d" % lv, tags="late"), level=lv
        ).msg_id
        for lv in (3, 3, 18)
    ]
    ids.append(
        svc.send_delayed(
            Message("orders", b"timer"),
            deliver_at_ms=int(time.time() * 1000) + 3_600_000,
        ).msg_id
    )
    return ids


@pytest.mark.parametrize("role", ["viewer", "operator", "admin"])
def test_levels_page(client_as, scheduled, role) -> None:
    body = client_as(role).get("/delays/").content.decode()
    assert body.count("<progress") == 18
    assert ">3<" in body  # two on level 3 plus one on 18: backlog 3 in the tile


def test_levels_partial_for_htmx(client_as, scheduled) -> None:
    r = client_as("viewer").get("/delays/", HTTP_HX_REQUEST="true")
    assert b"<html" not in r.content and b"<progress" in r.content


def test_scheduled_list_and_filters(client_as, scheduled) -> None:
    c = client_as("viewer")
    body = c.get("/delays/scheduled/").content.decode()
    assert all(i in body for i in scheduled)
    assert "Cancel</button>" not in body
    body = c.get("/delays/scheduled/", {"kind": "level", "level": 3}).content.decode()
    assert (
        scheduled[0] in body and scheduled[2] not in body and scheduled[3] not in body
    )
    body = c.get("/delays/scheduled/", {"kind": "timer"}).content.decode()
    assert scheduled[3] in body and scheduled[0] not in body


def test_cancel(client_as, scheduled) -> None:
    url = f"/delays/scheduled/{scheduled[0]}/cancel/"
    assert client_as("viewer").post(url, {"reason": "wrong price"}).status_code == 403
    assert (
        "Cancel</button>"
        in client_as("operator").get("/delays/scheduled/").content.decode()
    )
    r = client_as("operator").post(url, {"reason": "wrong price"}, follow=True)
    assert b"will not be delivered" in r.content
    body = client_as("viewer").get("/delays/scheduled/").content.decode()
    assert scheduled[0] not in body and scheduled[1] in body
    r = client_as("operator").post(url, {"reason": "again"}, follow=True)
    assert b"Not cancelled" in r.content
    assert list(
        AuditRecord.objects.order_by("id").values_list("status", flat=True)
    ) == ["success", "failed"]


def test_cancel_never_redirects_off_site(client_as, scheduled) -> None:
    r = client_as("operator").post(
        f"/delays/scheduled/{scheduled[1]}/cancel/",
        {"reason": "dup", "next": "https://evil.example/"},
    )
    assert r["Location"] == "/delays/scheduled/"
