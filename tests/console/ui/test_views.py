"""Sign-in everywhere, the role layer and the page frame."""

from __future__ import annotations

import pytest

from console.ui.roles import ADMIN, OPERATOR, VIEWER, has_role, user_role

pytestmark = pytest.mark.django_db


def test_roles_exist_as_groups() -> None:
    from django.contrib.auth.models import Group

    assert set(Group.objects.values_list("name", flat=True)) >= {
        VIEWER,
        OPERATOR,
        ADMIN,
    }


def test_user_role_is_the_highest_group(make_user) -> None:
    from django.contrib.auth.models import Group

    u = make_user("both", VIEWER)
    u.groups.add(Group.objects.get(name=OPERATOR))
    assert user_role(u) == OPERATOR
    assert has_role(u, VIEWER) and has_role(u, OPERATOR) and not has_role(u, ADMIN)


def test_superuser_is_admin(django_user_model) -> None:
    su = django_user_model.objects.create_superuser("root", password="x" * 12)
    assert user_role(su) == ADMIN


@pytest.mark.parametrize("url", ["/", "/audit/", "/audit/export.csv", "/api/docs/"])
def test_pages_redirect_anonymous_to_sign_in(client, url: str) -> None:
    response = client.get(url)
    assert response.status_code == 302
    assert response["Location"].startswith("/login/?next=")


def test_login_and_healthz_are_open(client) -> None:
    assert client.get("/login/").status_code == 200
    assert client.get("/healthz").status_code in (200, 503)


def test_sign_in_form(client, users) -> None:
    response = client.post(
        "/login/", {"username": "operator", "password": "correct-horse-battery-staple"}
    )
    assert response.status_code == 302
    page = client.get("/audit/")
    assert b'data-testid="role-badge">operator<' in page.content


def test_user_without_role_is_refused(client_as) -> None:
    response = client_as("none").get("/audit/")
    assert response.status_code == 403
    assert b"Not allowed" in response.content


def test_api_needs_authentication(client) -> None:
    response = client.get("/api/audit/")
    assert response.status_code in (401, 403)
    assert set(response.json()) >= {"code", "message"}


def test_schema_and_docs_are_served_offline(client_as) -> None:
    c = client_as("viewer")
    schema = c.get("/api/schema/")
    assert schema.status_code == 200
    docs = c.get("/api/docs/")
    assert docs.status_code == 200
    body = docs.content.decode()
    assert "cdn" not in body.lower() and "unpkg" not in body
    assert "/static/drf_spectacular_sidecar/" in body


def test_nav_and_vendor_assets_are_local(client_as) -> None:
    body = client_as("viewer").get("/audit/").content.decode()
    assert "/static/vendor/htmx-2.0.11.min.js" in body
    assert (
        "http://" not in body.replace("http://testserver", "")
        and "https://" not in body
    )


@pytest.mark.parametrize("role", ["viewer", "operator", "admin"])
def test_overview(client_as, broker, role) -> None:
    from broker_core import Message

    broker.send(Message("orders", b"x"))
    broker.commit_offset("g", "orders", 0, 0)
    body = client_as(role).get("/").content.decode()
    assert (
        "Overview" in body and "messages stored" in body and 'id="series-data"' in body
    )
    partial = client_as(role).get("/", HTTP_HX_REQUEST="true").content.decode()
    assert "<html" not in partial and "consumer lag" in partial


def test_overview_refuses_no_role(client_as, broker) -> None:
    assert client_as("none").get("/").status_code == 403
