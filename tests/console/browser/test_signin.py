"""Real headless Chromium: signing in and the role badge."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_sign_in_shows_role_and_nav(page, users, sign_in, screenshot) -> None:
    page.goto("/audit/")
    assert "/login/" in page.url
    page.fill("input[name=username]", "operator")
    page.fill("input[name=password]", "wrong password")
    page.click("button[type=submit]")
    # The refusal is a new page: wait for it (is_visible does not wait).
    expect(page.locator("[role=alert]")).to_be_visible()
    sign_in(page, "operator")
    assert (
        page.locator("[data-testid=role-badge]").inner_text().strip().lower()
        == "operator"
    )
    page.goto("/audit/")
    assert page.locator("h1").inner_text() == "Audit log"
    assert page.evaluate("typeof htmx") == "object"
    screenshot(page, "audit-log")


def test_api_docs_render_offline(page, users, sign_in) -> None:
    sign_in(page, "viewer")
    page.goto("/api/docs/")
    page.wait_for_selector(".swagger-ui .info .title")
    assert "Broker console API" in page.locator(".swagger-ui .info .title").inner_text()
    assert (
        page.locator(".opblock-summary-path", has_text="/api/transactions/").count()
        >= 1
    )
