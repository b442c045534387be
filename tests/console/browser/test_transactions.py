"""Real headless Chromium: an operator finds a stuck half by filter, rolls it
back with a reason, sees it leave the list and appear in the audit log."""

from __future__ import annotations

import time

import pytest

from broker_core import Message
from broker_core.transaction import CheckAnswer

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def stuck(broker):
    from console.brokerlink import get_transaction_service

    svc = get_transaction_service()
    for i in range(12):
        svc.send_half(
            "PID_shop", Message("orders", b'{"n": %d}' % i, keys=f"order-{i}")
        )
    r = svc.send_half(
        "PID_billing",
        Message("payments", b'{"invoice": 42}', keys="invoice-42", tags="invoice"),
    )
    half = svc.locate(r.transaction_id)
    now = int(time.time() * 1000)
    for n in range(7):
        svc.record_check(
            half,
            CheckAnswer.FAILED,
            "webhook",
            "http://billing/check",
            now - (7 - n) * 60_000,
            2_000_000,
            "HTTP 503",
        )
    return r.transaction_id


def test_operator_rolls_back_a_stuck_half(
    page, users, sign_in, stuck, screenshot
) -> None:
    sign_in(page, "operator")
    page.get_by_role("link", name="Transactions", exact=True).click()
    assert page.locator("[data-testid=half-list] tbody tr").count() == 13
    screenshot(page, "pending-list")
    page.fill("input[name=min_checks]", "5")
    page.fill("input[name=producer_group]", "PID_billing")
    page.get_by_role("button", name="Filter").click()
    rows = page.locator("[data-testid=half-list] tbody tr")
    assert rows.count() == 1 and "stuck" in rows.first.inner_text()
    page.get_by_role("link", name=stuck).click()
    assert page.locator("[data-testid=timeline] li").count() == 8
    assert "invoice" in page.locator("[data-testid=body-json]").inner_text()
    assert page.get_by_role("button", name="Commit").count() == 0  # admins only
    screenshot(page, "half")
    page.get_by_label("Rollback reason").fill("billing checker down since 02:00, INC-7")
    asked = []
    page.once("dialog", lambda d: (asked.append(d.message), d.accept()))
    page.get_by_role("button", name="Roll back").click()
    assert "Rolled back" in page.locator(".flash").inner_text()
    assert asked and "never be delivered" in asked[0]  # it asked first
    assert "rolled_back" in page.locator("[data-testid=half-state]").inner_text()
    page.goto("/transactions/")
    assert stuck not in page.locator("[data-testid=half-list]").inner_text()
    assert page.locator("[data-testid=half-list] tbody tr").count() == 12
    page.get_by_role("link", name="Audit", exact=True).click()
    first = page.locator("table.grid tbody tr").first.inner_text()
    assert "transaction.rollback" in first and "INC-7" in first and "operator" in first


def test_viewer_sees_no_body_or_actions_on_a_half(page, users, sign_in, stuck) -> None:
    sign_in(page, "viewer")
    page.goto(f"/transactions/{stuck}/")
    assert page.locator("[data-testid=body-hidden]").is_visible()
    assert page.locator("pre.body").count() == 0
    for name in ("Roll back", "Commit", "Resume check"):
        assert page.get_by_role("button", name=name).count() == 0
    page.goto("/transactions/")
    assert page.locator("input[name=ids]").count() == 0
    assert page.get_by_role("button", name="Roll back").count() == 0


def _bulk_rollback(page, reason: str) -> list[str]:
    page.get_by_label("Reason").fill(reason)
    asked: list[str] = []
    page.once("dialog", lambda d: (asked.append(d.message), d.accept()))
    page.locator(".bulkbar").get_by_role("button", name="Roll back").click()
    page.wait_for_load_state()
    return asked


def test_operator_bulk_rolls_back_the_selected_rows(
    page, users, sign_in, stuck
) -> None:
    sign_in(page, "operator")
    page.goto("/transactions/?producer_group=PID_shop")
    rows = page.locator("[data-testid=half-list] tbody tr")
    assert rows.count() == 12
    chosen = [rows.nth(i).locator("td.mono").inner_text() for i in (0, 3)]
    for tid in chosen:
        page.get_by_label(f"select {tid}").check()
    asked = _bulk_rollback(page, "duplicate orders from the 02:00 replay, INC-9")
    assert asked and "never be delivered" in asked[0]
    assert "Rolled back 2 half message(s)." in page.locator(".flash").inner_text()
    listed = page.locator("[data-testid=half-list]").inner_text()
    assert all(tid not in listed for tid in chosen)
    assert page.locator("[data-testid=half-list] tbody tr").count() == 10
    page.goto("/audit/")
    assert "INC-9" in page.locator("table.grid tbody").inner_text()


def test_operator_bulk_rolls_back_every_half_matching(
    page, users, sign_in, stuck
) -> None:
    sign_in(page, "operator")
    page.goto("/transactions/?producer_group=PID_shop&per_page=25")
    page.get_by_label("every half matching the filter").check()
    _bulk_rollback(page, "shop producer retired, INC-10")
    assert "Rolled back 12 half message(s)." in page.locator(".flash").inner_text()
    page.goto("/transactions/")
    rows = page.locator("[data-testid=half-list] tbody tr")
    assert rows.count() == 1 and stuck in rows.first.inner_text()


def test_rows_per_page_selector_pages_and_rolls_back_nothing(
    page, users, sign_in, stuck
) -> None:
    sign_in(page, "operator")
    page.goto("/transactions/?per_page=50")
    assert page.locator("[data-testid=half-list] tbody tr").count() == 13
    page.get_by_label("Rows per page").select_option("25")
    page.wait_for_url("**per_page=25**")
    assert page.locator(".flash").count() == 0  # no bulk POST, no error
    assert page.locator("[data-testid=half-list] tbody tr").count() == 13
    assert "1–13 of 13" in page.locator("nav.pager").inner_text()


def test_admin_resumes_a_discarded_half_and_commits_it(
    page, users, sign_in, stuck, broker
) -> None:
    """Resume check on a discarded half, then Commit with the typed
    confirmation: the message reaches its topic once."""
    from console.brokerlink import get_transaction_service

    svc = get_transaction_service()
    svc.discard(svc.locate(stuck), "max checks", 7)
    sign_in(page, "admin")
    page.goto(f"/transactions/{stuck}/")
    assert "discarded" in page.locator("[data-testid=half-state]").inner_text()
    page.get_by_label("Resume reason").fill("checker fixed, INC-8")
    page.get_by_role("button", name="Resume check").click()
    assert "pending" in page.locator("[data-testid=half-state]").inner_text()
    assert svc.state(stuck).value == "PENDING"

    page.get_by_label("Type COMMIT to confirm").fill("COMMIT")
    page.get_by_label("Commit reason").fill("invoice paid, INC-8")
    page.get_by_role("button", name="Commit").click()
    assert "committed" in page.locator("[data-testid=half-state]").inner_text()
    assert svc.state(stuck).value == "COMMITTED"
    delivered = broker.pull("probe", "payments", 0, 0, 32).messages
    assert [m.keys for m in delivered] == ["invoice-42"]
