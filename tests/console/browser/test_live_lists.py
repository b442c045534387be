"""Live lists refresh themselves, and their pause button stops them."""

from __future__ import annotations

import time

import pytest
from playwright.sync_api import expect

from broker_core import Message

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_the_pending_list_updates_itself_until_paused(
    page, users, sign_in, broker, settings
) -> None:
    from console.transactions.services import get_transaction_service

    settings.LIVE_REFRESH_SECONDS = 1
    svc = get_transaction_service()
    svc.send_half("pg", Message("Orders", b"first", keys="k-first"))
    sign_in(page, "operator")
    page.goto("/transactions/")
    rows = page.locator("[data-testid=half-list] tbody tr")
    assert rows.count() == 1
    svc.send_half("pg", Message("Orders", b"second", keys="k-second"))
    expect(rows).to_have_count(2, timeout=10_000)
    page.get_by_role("button", name="Pause").click()
    assert "paused" in page.locator(".livebar").inner_text()
    svc.send_half("pg", Message("Orders", b"third", keys="k-third"))
    time.sleep(3)  # three refresh periods
    assert rows.count() == 2
    page.get_by_role("button", name="Resume").click()
    expect(rows).to_have_count(3, timeout=10_000)
