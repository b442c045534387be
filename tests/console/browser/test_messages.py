"""Real headless Chromium: bodies hidden from viewers, HTML bodies inert."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from broker_core import Message

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

EVIL = (
    '<script>window.pwned = 1</script><img src="x" onerror="window.pwned = 2">'
    '<b id="injected">bold?</b>'
)


@pytest.fixture
def evil(broker):
    broker.create_topic("web", 1)
    return broker.send(Message("web", EVIL.encode(), tags="html", keys="evil")).msg_id


def test_viewer_sees_no_body_and_no_action_buttons(
    page, users, sign_in, evil, screenshot
) -> None:
    sign_in(page, "viewer")
    page.goto(f"/messages/{evil}/")
    assert page.locator("[data-testid=body-hidden]").is_visible()
    assert page.locator("pre.body").count() == 0
    assert "window.pwned" not in page.content()
    assert page.get_by_role("button", name="Resend").count() == 0
    page.goto("/topics/web/")
    for name in ("Send", "Delete", "Edit"):
        assert page.get_by_role("button", name=name).count() == 0
        assert page.get_by_role("link", name=name).count() == 0
    page.goto("/topics/")
    assert page.get_by_role("link", name="New topic").count() == 0
    screenshot(page, "viewer-topics")


def test_html_body_is_shown_inert(page, users, sign_in, evil, screenshot) -> None:
    sign_in(page, "operator")
    page.goto(f"/messages/{evil}/")
    text = page.locator("[data-testid=body-text]")
    assert text.is_visible()
    assert text.inner_text() == EVIL  # the markup is shown as characters
    assert page.evaluate("window.pwned === undefined")
    assert page.locator("#injected").count() == 0
    page.get_by_role("link", name="Hex").click()
    expect(page.locator("[data-testid=body-hex]")).to_be_visible()
    expect(page.get_by_role("button", name="Resend")).to_be_visible()
    screenshot(page, "message-html-body")
