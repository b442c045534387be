"""Real headless Chromium: an admin changes a consumer group's settings (FIFO,
delivery attempts) on its page, sees them shown, in the list and in the audit
log; the browser refuses attempts out of bounds before anything is sent."""

from __future__ import annotations

import pytest

from broker_core import Message

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def group(broker) -> str:
    from console.consumers.services import sync_offsets

    broker.create_topic("orders", 2)
    broker.send_batch([Message("orders", b"o", queue_id=i % 2) for i in range(10)])
    broker.commit_offset("CID_orders", "orders", 0, 2)
    sync_offsets(force=True)
    return "CID_orders"


def test_admin_makes_a_group_fifo_with_three_attempts(
    page, users, sign_in, group, broker, screenshot
) -> None:
    sign_in(page, "admin")
    page.get_by_role("link", name="Consumer groups", exact=True).click()
    page.get_by_role("link", name=group, exact=True).click()
    fifo = page.locator("[data-testid=group-fifo]")
    attempts = page.locator("[data-testid=group-attempts]")
    assert fifo.inner_text().startswith("no")
    assert attempts.inner_text().startswith("default (17)")

    # Out of bounds: the browser keeps the form (min 1, max 1000) and says why.
    box = page.get_by_label("Max delivery attempts")
    box.fill("1001")
    page.get_by_label("Settings reason").fill("too many")
    page.get_by_role("button", name="Save settings").click()
    assert box.evaluate("e => e.validity.rangeOverflow")
    assert page.locator(".flash").count() == 0
    assert broker.store.groups.get(group) is None

    page.get_by_label("FIFO").check()
    box.fill("3")
    page.get_by_label("Settings reason").fill("payments must stay in order, CHG-12")
    page.get_by_role("button", name="Save settings").click()
    flash = page.locator(".flash").inner_text()
    assert f"Settings of {group} saved: FIFO on, 3 delivery attempts" in flash
    assert fifo.inner_text().startswith("yes")
    assert attempts.inner_text().startswith("3")
    assert page.get_by_label("FIFO").is_checked()
    assert box.input_value() == "3"
    screenshot(page, "consumer-group-settings")
    assert broker.store.groups.is_fifo(group)
    assert broker.store.groups.max_attempts(group, 17) == 3

    page.locator("p.crumbs").get_by_role("link", name="Consumer groups").click()
    row = page.locator("tr", has=page.get_by_role("link", name=group, exact=True))
    assert "FIFO" in row.inner_text() and "3 attempts" in row.inner_text()

    page.get_by_role("link", name="Audit", exact=True).click()
    first = page.locator("table.grid tbody tr").first.inner_text()
    assert "consumer_group.update_settings" in first
    assert "CHG-12" in first and "admin" in first and group in first


def test_an_operator_sees_the_settings_but_no_form(page, users, sign_in, group) -> None:
    sign_in(page, "operator")
    page.goto(f"/consumer-groups/{group}/")
    assert page.locator("[data-testid=group-fifo]").inner_text().startswith("no")
    assert page.get_by_role("button", name="Save settings").count() == 0
    assert page.get_by_role("button", name="Reset offsets").count() == 1
