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


def test_repeated_wrong_passwords_lock_the_login_out(client, users) -> None:
    """Five wrong passwords for one user from one address: even the right one is
    then refused (429) for the cool-off, the lock-out is audited, and another
    user signs in as usual."""
    from console.audit.models import AuditRecord

    good = {"username": "operator", "password": "correct-horse-battery-staple"}
    for _ in range(5):
        r = client.post("/login/", {"username": "operator", "password": "wrong"})
        assert r.status_code in (200, 429)  # the form again, then locked
    locked = client.post("/login/", good)
    assert locked.status_code == 429
    assert b"Too many failed sign-ins" in locked.content
    assert int(locked["Retry-After"]) == 15 * 60
    assert client.get("/audit/").status_code == 302  # not signed in
    records = AuditRecord.objects.filter(action="login.locked_out")
    assert records.exists()  # each refused attempt while locked is recorded
    assert {(r.object_id, r.status) for r in records} == {("operator", "denied")}
    other = client.post(
        "/login/", {"username": "viewer", "password": "correct-horse-battery-staple"}
    )
    assert other.status_code == 302


@pytest.mark.parametrize("proxy_header", ["", "HTTP_X_FORWARDED_FOR"])
def test_rotating_x_forwarded_for_does_not_dodge_the_login_lock_out(
    client, users, settings, proxy_header
) -> None:
    """A guesser who writes a new X-Forwarded-For on every try is still locked
    out after five: the header is ignored unless configured, and when it is,
    only the entry the trusted proxy appended (the right-most) counts."""
    settings.TRUSTED_PROXY_HEADER = proxy_header
    settings.TRUSTED_PROXY_COUNT = 1
    real = ", 192.0.2.50" if proxy_header else ""
    for i in range(5):
        client.post(
            "/login/",
            {"username": "operator", "password": "wrong"},
            HTTP_X_FORWARDED_FOR=f"10.3.0.{i}{real}",
        )
    locked = client.post(
        "/login/",
        {"username": "operator", "password": "correct-horse-battery-staple"},
        HTTP_X_FORWARDED_FOR=f"10.3.0.99{real}",
    )
    assert locked.status_code == 429
    assert b"Too many failed sign-ins" in locked.content


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
    # A missing or bad token is 401 with the scheme to use, not 403.
    response = client.get("/api/audit/")
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == "Token"
    assert set(response.json()) >= {"code", "message"}
    bad = client.get("/api/audit/", HTTP_AUTHORIZATION="Token not-a-real-token")
    assert bad.status_code == 401 and bad["WWW-Authenticate"] == "Token"


def test_signed_in_api_users_are_rate_limited(api_as, monkeypatch) -> None:
    from django.core.cache import cache
    from rest_framework.throttling import UserRateThrottle

    cache.clear()
    monkeypatch.setattr(UserRateThrottle, "THROTTLE_RATES", {"user": "3/min"})
    api = api_as("viewer")
    codes = [api.get("/api/audit/").status_code for _ in range(4)]
    assert codes == [200, 200, 200, 429]
    cache.clear()


def test_pages_carry_a_strict_content_security_policy(client_as) -> None:
    """No inline script may run on a console page: the policy allows only the
    console's own files, and no template has an inline script or handler."""
    import re
    from pathlib import Path

    r = client_as("operator").get("/")
    policy = dict(
        part.strip().split(" ", 1) for part in r["Content-Security-Policy"].split(";")
    )
    assert policy["script-src"] == "'self'"
    assert policy["object-src"] == "'none'" and policy["frame-ancestors"] == "'none'"
    assert "unsafe-inline" not in r["Content-Security-Policy"]
    templates = Path(__file__).resolve().parents[3] / "templates"
    for path in templates.rglob("*.html"):
        text = path.read_text()
        assert not re.search(r"<script(?![^>]*\bsrc=)", text), path
        assert not re.search(r"\son[a-z]+\s*=", text), path
    docs = client_as("operator").get("/api/docs/")
    nonce = re.search(rb'<style nonce="([^"]+)"', docs.content).group(1).decode()
    assert f"'nonce-{nonce}'" in docs["Content-Security-Policy"]


def test_production_settings_pass_the_deploy_check(tmp_path) -> None:
    """Under the documented production settings (HTTPS=true, DEBUG off, a real
    key and host) `manage.py check --deploy` finds nothing: Secure cookies,
    HSTS and the HTTPS redirect are on."""
    import os
    import secrets
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[3]
    env = dict(
        os.environ,
        HTTPS="true",
        DEBUG="false",
        SECRET_KEY=secrets.token_urlsafe(60),
        ALLOWED_HOSTS="broker.example.com",
        BROKER_STORE_DIR=str(tmp_path / "store"),
        DATABASE_URL=f"sqlite:///{tmp_path / 'db.sqlite3'}",
    )
    env.pop("DJANGO_SETTINGS_MODULE", None)
    check = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert check.returncode == 0, check.stdout + check.stderr
    assert "no issues" in check.stdout
    show = subprocess.run(
        [
            sys.executable,
            "manage.py",
            "shell",
            "-c",
            "from django.conf import settings as s; print(s.SESSION_COOKIE_SECURE, "
            "s.CSRF_COOKIE_SECURE, s.SECURE_SSL_REDIRECT, s.SECURE_HSTS_SECONDS)",
        ],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert show.stdout.strip().splitlines()[-1] == "True True True 31536000"


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


def test_a_clients_heartbeat_names_its_zone_once() -> None:
    """The ``when`` filter already prints the zone ("... UTC · 5 s ago"); the
    clients table printed "UTC" after it again."""
    import time

    from django.template.loader import render_to_string

    html = render_to_string(
        "ui/_clients.html",
        {"clients": [{"client_id": "c1", "client_type": "SIMPLE_CONSUMER",
                      "language": "PYTHON", "version": "5.1.2",
                      "address": "127.0.0.1:5", "topics": ["T"],
                      "last_heartbeat_ms": int(time.time() * 1000),
                      "online": True}]},
    )  # fmt: skip
    assert html.count("UTC") == 1, html
