"""Live lists refresh themselves, and their pause button stops them."""

from __future__ import annotations

import time

import pytest
from playwright.sync_api import expect

from broker_core import Message

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


#: The contrast ratio of an element's text colour against the first opaque
#: background behind it (WCAG 2 relative luminance).
CONTRAST_JS = """(el) => {
  const rgb = (s) => s.match(/[\\d.]+/g).map(Number);
  const lum = ([r, g, b]) => {
    const f = (c) => {
      c /= 255;
      return c <= 0.03928 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4;
    };
    return 0.2126 * f(r) + 0.7152 * f(g) + 0.0722 * f(b);
  };
  let bg = null;
  for (let n = el; n && !bg; n = n.parentElement) {
    const c = rgb(getComputedStyle(n).backgroundColor);
    if (c.length === 3 || c[3] > 0) bg = c.slice(0, 3);
  }
  bg = bg || [255, 255, 255];
  const a = lum(rgb(getComputedStyle(el).color)), b = lum(bg);
  return (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05);
}"""


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
    # Readable: WCAG AA contrast (4.5:1) against the page (it was a pale
    # grey meant for the dark top bar: 1.2:1).
    ratio = page.get_by_role("button", name="Pause").evaluate(CONTRAST_JS)
    assert ratio >= 4.5, ratio
    page.get_by_role("button", name="Pause").click()
    assert "paused" in page.locator(".livebar").inner_text()
    svc.send_half("pg", Message("Orders", b"third", keys="k-third"))
    time.sleep(3)  # three refresh periods
    assert rows.count() == 2
    page.get_by_role("button", name="Resume").click()
    expect(rows).to_have_count(3, timeout=10_000)
