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


@pytest.fixture
def dead(broker) -> list[str]:
    """Three dead letters of CID_orders, as the endpoint writes them when a
    message used up its delivery attempts: a copy in %DLQ%CID_orders."""
    from broker_core.message import MessageInner
    from console.consumers.services import sync_offsets

    broker.create_topic("orders", 2)
    broker.commit_offset("CID_orders", "orders", 0, 0)
    ids = []
    for i in range(3):
        sent = broker.send(Message("orders", b"poison-%d" % i, keys=f"order-{i}"))
        original = broker.get_message(sent.msg_id)
        props = dict(original.properties)
        props.update(RETRY_TOPIC="orders", ORIGIN_MESSAGE_ID=sent.msg_id,
                     DLQ_ORIGIN_QUEUE=str(original.queue_id),
                     DLQ_ORIGIN_OFFSET=str(original.queue_offset))  # fmt: skip
        broker.store.put_inner(
            MessageInner(
                topic="%DLQ%CID_orders",
                queue_id=0,
                body=original.body,
                properties=props,
                reconsume_times=16,
            )  # fmt: skip
        )
        ids.append(sent.msg_id)
    sync_offsets(force=True)
    return ids


def test_operator_resends_dead_letters_to_the_group(
    page, users, sign_in, dead, broker, screenshot
) -> None:
    sign_in(page, "operator")
    page.goto("/consumer-groups/CID_orders/")
    tile = page.locator("[data-testid=dead-letters]")
    assert tile.inner_text().startswith("3")
    tile.click()
    assert page.locator("[data-testid=dlq-total]").inner_text() == "3"
    rows = page.locator("[data-testid=dlq-list] tbody tr")
    assert rows.count() == 3
    assert "orders" in rows.first.inner_text() and "16" in rows.first.inner_text()
    with page.expect_download() as dl:
        page.get_by_role("link", name="Download as CSV").click()
    csv_text = open(dl.value.path()).read()
    assert csv_text.count("\n") == 4 and "order-2" in csv_text
    screenshot(page, "dead-letters")
    for key in ("order-0", "order-2"):
        page.locator("tr", has_text=key).get_by_role("checkbox").check()
    page.get_by_label("Resend reason").fill("payments API fixed, INC-31")
    asked = []
    page.once("dialog", lambda d: (asked.append(d.message), d.accept()))
    page.get_by_role("button", name="Resend").click()
    assert (
        "Resent 2 dead letter(s) to CID_orders." in page.locator(".flash").inner_text()
    )
    assert asked
    # In the group's retry queue, for its consumers of "orders".
    retry = broker.pull("probe", "%RETRY%CID_orders", 0, 0, 10).messages
    assert sorted(m.properties["KEYS"] for m in retry) == ["order-0", "order-2"]
    assert all(m.properties["RETRY_TOPIC"] == "orders" for m in retry)
    # The page says which were resent; selecting them again skips them unless
    # "resend again" is ticked.
    resent = page.locator("[data-testid=dlq-list] tr", has_text="order-0")
    assert "by operator" in resent.locator("[data-testid=resent]").inner_text()
    page.locator("tr", has_text="order-0").get_by_role("checkbox").check()
    page.get_by_label("Resend reason").fill("again, by mistake")
    page.once("dialog", lambda d: d.accept())
    page.get_by_role("button", name="Resend").click()
    assert "1 skipped: already resent" in page.locator(".flash").inner_text()
    page.locator("tr", has_text="order-0").get_by_role("checkbox").check()
    page.get_by_label("Resend reason").fill("consumer lost it, resend on purpose")
    page.get_by_label("resend again those already resent").check()
    page.once("dialog", lambda d: d.accept())
    page.get_by_role("button", name="Resend").click()
    assert "Resent 1 dead letter(s)" in page.locator(".flash").inner_text()
    assert len(broker.pull("probe", "%RETRY%CID_orders", 0, 0, 10).messages) == 3
    page.goto("/audit/")
    audit = page.locator("table.grid tbody").inner_text()
    assert audit.count("message.resend") == 3 and "INC-31" in audit


def test_a_viewer_lists_dead_letters_but_cannot_resend(
    page, users, sign_in, dead
) -> None:
    sign_in(page, "viewer")
    page.goto("/consumer-groups/CID_orders/dead-letters/")
    assert page.locator("[data-testid=dlq-list] tbody tr").count() == 3
    assert page.get_by_role("button", name="Resend").count() == 0
    assert page.locator("input[name=ids]").count() == 0
