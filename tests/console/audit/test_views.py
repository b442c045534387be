"""Audit log: immutable records, the searchable page and the CSV export."""

from __future__ import annotations

import csv
import io

import pytest

from console.audit.models import AuditRecord, ImmutableError
from console.audit.services import audited, record_audit

pytestmark = pytest.mark.django_db


@pytest.fixture
def records(users):
    record_audit(
        actor=users["operator"],
        action="transaction.rollback",
        object_type="transaction",
        object_id="AC10000100002A9F",
        reason="stuck since Monday",
        before={"state": "pending"},
        after={"state": "rolled_back"},
    )
    record_audit(
        actor=users["admin"],
        action="topic.create",
        object_type="topic",
        object_id="orders",
        after={"queues": 8},
    )
    record_audit(
        actor=None,
        action="topic.delete",
        object_type="topic",
        object_id='=HYPERLINK("x")',
        status="failed",
        message="boom",
    )
    return AuditRecord.objects.all()


def test_records_cannot_change(records) -> None:
    r = records.first()
    r.reason = "rewritten"
    with pytest.raises(ImmutableError):
        r.save()
    with pytest.raises(ImmutableError):
        r.delete()
    with pytest.raises(ImmutableError):
        AuditRecord.objects.update(reason="x")
    with pytest.raises(ImmutableError):
        AuditRecord.objects.all().delete()


def test_audited_records_failures_and_reraises(users) -> None:
    def boom():
        raise RuntimeError("disk on fire")

    with pytest.raises(RuntimeError):
        audited(
            boom,
            actor=users["admin"],
            action="topic.delete",
            object_type="topic",
            object_id="t",
        )
    r = AuditRecord.objects.get()
    assert r.status == "failed" and "disk on fire" in r.message
    assert r.actor_username == "admin"


@pytest.mark.parametrize("role", ["viewer", "operator", "admin"])
def test_every_role_reads_the_log(client_as, records, role) -> None:
    body = client_as(role).get("/audit/").content.decode()
    assert "transaction.rollback" in body and "topic.create" in body


def test_no_role_cannot_read_the_log(client_as, records) -> None:
    assert client_as("none").get("/audit/").status_code == 403
    assert client_as("none").get("/audit/export.csv").status_code == 403


def test_search_and_filter(client_as, records) -> None:
    c = client_as("viewer")
    body = c.get("/audit/", {"q": "monday"}).content.decode()
    assert "transaction.rollback" in body and "topic.create" not in body
    body = c.get("/audit/", {"status": "failed"}).content.decode()
    assert "topic.delete" in body and "topic.create" not in body
    body = c.get("/audit/", {"actor": "admin", "sort": "action"}).content.decode()
    assert "topic.create" in body and "transaction.rollback" not in body


def test_detail_page(client_as, records) -> None:
    r = records.get(action="transaction.rollback")
    body = client_as("viewer").get(f"/audit/{r.pk}/").content.decode()
    assert "stuck since Monday" in body and "rolled_back" in body


def test_csv_export_streams_filtered_rows(client_as, records) -> None:
    response = client_as("viewer").get("/audit/export.csv", {"object_type": "topic"})
    assert response.status_code == 200 and response.streaming
    text = b"".join(response.streaming_content).decode()
    rows = list(csv.DictReader(io.StringIO(text)))
    assert {r["action"] for r in rows} == {"topic.create", "topic.delete"}
    # A formula in a cell is neutralised for spreadsheets.
    assert next(r for r in rows if r["action"] == "topic.delete")[
        "object_id"
    ].startswith("'=")


def test_admin_site_is_read_only(client, django_user_model, records) -> None:
    su = django_user_model.objects.create_superuser("root", password="x" * 12)
    client.force_login(su)
    r = records.first()
    assert client.get("/admin/audit/auditrecord/").status_code == 200
    assert client.get("/admin/audit/auditrecord/add/").status_code == 403
    page = client.get(f"/admin/audit/auditrecord/{r.pk}/change/")
    assert page.status_code == 200 and b'name="_save"' not in page.content
    response = client.post(f"/admin/audit/auditrecord/{r.pk}/delete/", {"post": "yes"})
    assert response.status_code == 403
    assert AuditRecord.objects.filter(pk=r.pk).exists()
