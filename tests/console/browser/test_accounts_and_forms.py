"""Real headless Chromium over the forms no other browser test clicks: an
admin adds a user and changes a role, anyone picks a time zone and makes an
API token (which then works on the REST API), signs out; an operator searches
messages by key, jumps to a queue offset, sends a message to a topic, cancels
a scheduled message and deletes a topic; an admin saves a report schedule."""

from __future__ import annotations

import json
import time
import urllib.request

import pytest

from broker_core import Message

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def flash(page) -> str:
    return page.locator(".flash").first.inner_text()


def test_admin_adds_a_user_sets_a_role_and_everyone_manages_their_account(
    page, users, sign_in, live_server, broker
) -> None:
    from django.contrib.auth import get_user_model

    from console.ui.roles import user_role

    sign_in(page, "admin")
    page.goto("/users/")
    page.get_by_label("Username", exact=True).fill("night-shift")
    page.get_by_label("Role", exact=True).select_option("operator")
    page.get_by_label("Password", exact=True).fill("a long enough secret")
    page.get_by_role("button", name="Add user").click()
    assert "User night-shift added as operator." in flash(page)
    added = get_user_model().objects.get(username="night-shift")
    assert user_role(added) == "operator"

    page.get_by_label("Role of night-shift").select_option("viewer")
    row = page.locator("tr", has=page.get_by_text("night-shift", exact=True))
    row.get_by_role("button", name="Set").click()
    assert "night-shift is now viewer." in flash(page)
    assert user_role(get_user_model().objects.get(username="night-shift")) == "viewer"

    # My account: a time zone for every time shown, and an API token.
    page.goto("/account/")
    page.locator("#tz").select_option("Asia/Tokyo")
    page.locator("[data-testid=time-zone]").get_by_role("button", name="Save").click()
    assert "Times now show in Asia/Tokyo." in flash(page)
    assert page.locator("#tz").input_value() == "Asia/Tokyo"
    page.get_by_role("button", name="Create an API token").click()
    key = page.locator("[data-testid=new-token]").inner_text().strip()
    assert len(key) >= 20
    req = urllib.request.Request(
        f"{live_server.url}/api/topics/", headers={"Authorization": f"Token {key}"}
    )
    with urllib.request.urlopen(req, timeout=10) as r:
        assert r.status == 200 and isinstance(json.loads(r.read()), dict | list)
    page.get_by_role("button", name="Replace my API token").click()
    again = page.locator("[data-testid=new-token]").inner_text().strip()
    assert again != key
    with pytest.raises(urllib.error.HTTPError) as old:
        urllib.request.urlopen(req, timeout=10)
    assert old.value.code in (401, 403)

    page.get_by_role("button", name="Sign out").click()
    page.wait_for_url("**/login/**")
    page.goto("/account/")
    assert "/login/" in page.url


def test_an_operator_searches_jumps_sends_cancels_and_deletes(
    page, users, sign_in, broker
) -> None:
    from broker_core.schedule import DelayService

    broker.create_topic("orders", 1)
    broker.send_batch(
        [Message("orders", b"order %d" % i, keys=f"ord-{i}") for i in range(12)]
    )
    delays = DelayService(broker)
    due = int(time.time() * 1000) + 3_600_000
    later = delays.send_delayed(
        Message("orders", b"reminder", keys="remind-1"), deliver_at_ms=due
    )
    sign_in(page, "operator")

    # Search by key (the index of one topic).
    page.goto("/messages/")
    page.get_by_label("Topic").fill("orders")
    page.get_by_label("Key").fill("ord-7")
    page.get_by_role("button", name="Search").click()
    found = page.locator("main").inner_text()
    assert "1 found" in found and "ord-7" in found and "ord-6" not in found

    # A queue from an offset.
    page.goto("/topics/orders/queues/0/")
    page.get_by_label("From offset").fill("10")
    page.get_by_role("button", name="Go").click()
    shown = page.locator("table.grid tbody").inner_text()
    assert "ord-10" in shown and "ord-11" in shown and "ord-9" not in shown

    # A test message from the topic's page: stored with its tags and keys.
    page.goto("/topics/orders/")
    page.get_by_label("Body").fill("hello from the console")
    page.get_by_label("Tags").fill("TagA")
    page.get_by_label("Keys").fill("console-1")
    page.get_by_role("button", name="Send", exact=True).click()
    assert "Sent " in flash(page) and "to queue 0 at offset 12" in flash(page)
    sent = broker.query_by_key("orders", "console-1")
    assert [(m.body, m.tags) for m in sent] == [(b"hello from the console", "TagA")]

    # Cancel the scheduled message before it is due: a reason, then confirm.
    page.goto("/delays/scheduled/")
    row = page.locator("tr", has=page.get_by_text(later.msg_id))
    row.locator("input[name=reason]").fill("customer called, CHG-9")
    asked: list[str] = []
    page.once("dialog", lambda d: (asked.append(d.message), d.accept()))
    row.get_by_role("button", name="Cancel").click()
    assert asked and "never be delivered" in asked[0]
    assert f"Cancelled {later.msg_id}" in flash(page)
    assert delays.stats().timers.pending == 0
    delays.close()


def test_an_admin_edits_and_deletes_a_topic_and_sets_a_checker(
    page, users, sign_in, broker
) -> None:
    from console.brokerlink import node_ops

    broker.create_topic("old-orders", 2)
    broker.send(Message("old-orders", b"x"))
    sign_in(page, "admin")

    page.goto("/topics/old-orders/")
    page.get_by_role("link", name="Edit", exact=True).click()
    page.get_by_label("Read queues").fill("4")
    page.get_by_label("Write queues").fill("4")
    page.get_by_label("Reason").fill("more consumers, CHG-3")
    page.get_by_role("button", name="Save").click()
    assert "Topic old-orders updated." in flash(page)
    cfg = broker.store.topic_config("old-orders")
    assert (cfg.read_queue_nums, cfg.write_queue_nums) == (4, 4)

    page.get_by_role("link", name="Delete", exact=True).click()
    page.get_by_label("Type the topic name to confirm").fill("old-orders")
    page.get_by_label("Reason").fill("retired, CHG-4")
    page.get_by_role("button", name="Delete topic").click()
    assert "Topic old-orders deleted." in flash(page)
    assert "old-orders" not in {t.topic_name for t in broker.list_topics()}

    # A producer group's check-back webhook: saved, then removed.
    page.goto("/producer-groups/PID_pay/")
    page.get_by_label("Webhook URL").fill("https://hooks.example.com/check")
    page.get_by_label("Secret").fill("a signing secret")
    page.get_by_label("Timeout (s)").fill("3")
    page.get_by_role("button", name="Save webhook").click()
    assert "Check-backs of PID_pay now go to https://hooks.example.com/check" in (
        flash(page)
    )
    saved = node_ops().checkers().get("PID_pay") or {}
    assert saved.get("url") == "https://hooks.example.com/check", saved
    page.once("dialog", lambda d: d.accept())
    page.get_by_role("button", name="Remove checker").click()
    assert "Checker of PID_pay removed." in flash(page)
    assert page.get_by_role("button", name="Remove checker").count() == 0
    assert node_ops().checkers().get("PID_pay") is None


def test_an_operator_schedules_a_report_over_a_rolling_window(
    page, users, sign_in, broker
) -> None:
    from django_celery_beat.models import PeriodicTask

    sign_in(page, "operator")
    page.goto("/reports/consumer_lag/")
    page.get_by_label("Enabled").check()
    page.get_by_label("Every minutes").fill("30")
    page.get_by_label("Each run covers").select_option("24h")
    page.get_by_role("button", name="Save schedule").click()
    assert "Schedule saved." in flash(page)
    # The form shows what is saved now.
    assert page.get_by_label("Enabled").is_checked()
    assert page.get_by_label("Every minutes").input_value() == "30"
    assert page.get_by_label("Each run covers").input_value() == "24h"
    task = PeriodicTask.objects.get(name__contains="consumer_lag")
    assert task.enabled and task.interval.every == 30
    assert json.loads(task.kwargs).get("window") == "24h"
