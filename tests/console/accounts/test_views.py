"""Users page: admins only; add a user, change a role; audited."""

from __future__ import annotations

import pytest

from console.audit.models import AuditRecord
from console.ui.roles import user_role

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("role", ["viewer", "operator", "none"])
def test_non_admins_refused(client_as, users, role) -> None:
    c = client_as(role)
    assert c.get("/users/").status_code == 403
    assert (
        c.post(
            "/users/", {"username": "x", "role": "admin", "password": "longenough1"}
        ).status_code
        == 403
    )
    assert (
        c.post(f"/users/{users['viewer'].pk}/role/", {"role": "admin"}).status_code
        == 403
    )
    assert user_role(users["viewer"]) == "viewer"
    assert "/users/" not in client_as(role).get("/audit/").content.decode()


def test_admin_adds_and_changes(client_as, users, django_user_model) -> None:
    c = client_as("admin")
    body = c.get("/users/").content.decode()
    assert "operator" in body and "Add user" in body
    r = c.post(
        "/users/", {"username": "dana", "role": "operator", "password": "longenough1"}
    )
    assert r.status_code == 302
    dana = django_user_model.objects.get(username="dana")
    assert user_role(dana) == "operator"
    c.post(f"/users/{dana.pk}/role/", {"role": "viewer"})
    dana = django_user_model.objects.get(username="dana")
    assert user_role(dana) == "viewer"
    c.post(f"/users/{users['admin'].pk}/role/", {"role": "viewer"})  # not yourself
    assert user_role(django_user_model.objects.get(username="admin")) == "admin"
    assert list(
        AuditRecord.objects.order_by("id").values_list("action", flat=True)
    ) == ["user.create", "user.change_role"]
    r = c.post(
        "/users/", {"username": "dana", "role": "viewer", "password": "longenough1"}
    )
    assert r.status_code == 200 and b"already exists" in r.content


@pytest.mark.parametrize("role", ["viewer", "operator", "admin"])
def test_my_api_token(client_as, client, role) -> None:
    c = client_as(role)
    assert b"Create an API token" in c.get("/account/").content
    body = c.post("/account/").content.decode()
    key = body.split('data-testid="new-token">')[1].split("<")[0]
    r = client.get("/api/audit/", HTTP_AUTHORIZATION=f"Token {key}")
    assert r.status_code == 200
    c.post("/account/")  # replacing revokes the old one
    revoked = client.get("/api/audit/", HTTP_AUTHORIZATION=f"Token {key}")
    assert revoked.status_code in (401, 403)
    assert AuditRecord.objects.filter(action="user.rotate_token").count() == 2


def test_account_page_needs_a_role(client_as) -> None:
    assert client_as("none").get("/account/").status_code == 403


def test_each_user_reads_times_in_the_zone_they_chose(client, client_as, users) -> None:
    """A per-user choice, kept across sign-ins; the default is the console's
    TIME_ZONE (UTC)."""
    from tests.console.conftest import PASSWORD

    c = client_as("operator")
    c.post("/account/")  # an API token: the page shows when it was created
    assert " UTC</time>" in c.get("/account/").content.decode()
    assert c.post("/account/", {"time_zone": "Mars/Olympus"}).status_code == 302
    assert " UTC</time>" in c.get("/account/").content.decode()  # refused
    c.post("/account/", {"time_zone": "Asia/Tokyo"})
    page = c.get("/account/").content.decode()
    assert " JST</time>" in page and "<option selected>Asia/Tokyo</option>" in page
    # Another sign-in of the same user; another user keeps the default.
    signed_in = client.post("/login/", {"username": "operator", "password": PASSWORD})
    assert signed_in.status_code == 302
    client.post("/account/")
    assert " JST</time>" in client.get("/account/").content.decode()
    other = client_as("viewer")
    other.post("/account/")
    assert " UTC</time>" in other.get("/account/").content.decode()
