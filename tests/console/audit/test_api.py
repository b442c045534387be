"""``GET /api/audit/``: read only, filtered by the page's FilterSet."""

from __future__ import annotations

import pytest

from console.audit.services import record_audit

pytestmark = pytest.mark.django_db


@pytest.fixture
def records(users):
    for i in range(3):
        record_audit(
            actor=users["operator"],
            action="offset.reset",
            object_type="consumer_group",
            object_id=f"g{i}",
            reason="replay",
        )
    record_audit(
        actor=users["admin"],
        action="topic.create",
        object_type="topic",
        object_id="orders",
    )


@pytest.mark.parametrize("role", ["viewer", "operator", "admin"])
def test_list(api_as, records, role) -> None:
    data = api_as(role).get("/api/audit/").json()
    assert data["count"] == 4
    assert data["results"][0]["action"] == "topic.create"  # newest first


def test_filters_match_the_page(api_as, records) -> None:
    data = (
        api_as("viewer")
        .get("/api/audit/", {"action": "offset", "object_id": "g1"})
        .json()
    )
    assert [r["object_id"] for r in data["results"]] == ["g1"]


def test_no_role_is_refused(api_as, records) -> None:
    response = api_as("none").get("/api/audit/")
    assert response.status_code == 403
    assert response.json()["code"] == "permission_denied"


@pytest.mark.parametrize("method", ["post", "put", "patch", "delete"])
def test_never_editable(api_as, records, method) -> None:
    from console.audit.models import AuditRecord

    pk = AuditRecord.objects.first().pk
    url = "/api/audit/" if method == "post" else f"/api/audit/{pk}/"
    response = getattr(api_as("admin"), method)(url, {"reason": "x"}, format="json")
    assert response.status_code == 405
    assert AuditRecord.objects.count() == 4
