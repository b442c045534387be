"""Real headless Chromium on the Cluster page over two real nodes (stores with
their admin API on 127.0.0.1): an operator searches every broker for a key,
resets a group's offsets on one master, cancels a delayed message on the
other (each after its confirm), and picks a node for the single-store pages."""

from __future__ import annotations

import time

import pytest

from broker_core import Message
from broker_core.schedule import DelayService

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def flash(page) -> str:
    return page.locator(".flash").first.inner_text()


def test_an_operator_searches_resets_and_cancels_across_the_cluster(
    nodes, page, users, sign_in
) -> None:
    a = nodes.start("broker-a")
    b = nodes.start("broker-b")
    a.create_topic("orders", 1)
    b.create_topic("orders", 1)
    a.send_batch([Message("orders", b"a%d" % i, keys=f"k-a{i}") for i in range(5)])
    b.send(Message("orders", b"b-only", keys="k-shared"))
    a.send(Message("orders", b"a-shared", keys="k-shared"))
    a.commit_offset("GID_orders", "orders", 0, 5)
    delays = DelayService(b)
    later = delays.send_delayed(
        Message("orders", b"later"), deliver_at_ms=int(time.time() * 1000) + 3_600_000
    )
    sign_in(page, "operator")
    page.goto("/cluster/")

    # A key on every broker: both copies, each with its node.
    search = page.locator("[data-testid=search-form]")
    search.get_by_label("Topic").fill("orders")
    search.get_by_label("Key").fill("k-shared")
    search.get_by_role("button", name="Search").click()
    rows = page.locator("tr", has=page.get_by_role("cell", name="k-shared", exact=True))
    assert sorted(r.split("\t")[0] for r in rows.all_inner_texts()) == [
        "broker-a",
        "broker-b",
    ]

    # Reset GID_orders on broker-a to offset 2 (after the confirm).
    reset = page.locator("[data-testid=reset-form]")
    reset.get_by_label("Master to reset on").select_option("broker-a")
    reset.get_by_label("Consumer group").fill("GID_orders")
    reset.get_by_label("Topic of the group").fill("orders")
    reset.get_by_label("Offset to reset to").fill("2")
    reset.get_by_label("Reason for the reset").fill("replay after the fix, CHG-7")
    asked: list[str] = []
    page.once("dialog", lambda d: (asked.append(d.message), d.accept()))
    reset.get_by_role("button", name="Reset").click()
    assert asked and "committed offsets" in asked[0]
    assert "Reset GID_orders on orders on broker-a: queue 0 -> 2." in flash(page)
    assert a.store.committed_offset("GID_orders", "orders", 0) == 2

    # Cancel broker-b's delayed message.
    cancel = page.locator("[data-testid=cancel-form]")
    cancel.get_by_label("Master holding the delayed message").select_option("broker-b")
    cancel.get_by_label("Delayed message id").fill(later.msg_id)
    cancel.get_by_label("Reason for the cancel").fill("customer called, CHG-8")
    page.once("dialog", lambda d: d.accept())
    cancel.get_by_role("button", name="Cancel delivery").click()
    assert f"Cancelled {later.msg_id} on broker-b" in flash(page)
    assert delays.stats().timers.pending == 0
    delays.close()

    # The node picker: the single-store pages show the node picked.
    page.goto("/topics/")
    picker = page.locator("[data-testid=node-picker]")
    picker.select_option("broker-b")
    page.locator("[data-testid=pick-node]").click()
    assert page.locator("[data-testid=node-picker]").input_value() == "broker-b"


def test_an_operator_resumes_a_discarded_half_on_its_node(
    nodes, page, users, sign_in
) -> None:
    """The Cluster page's discarded list: Resume (with its reason) on the node
    that holds the half; it is pending there again and leaves the list."""
    from broker_core.transaction import TransactionService, TransactionState

    nodes.start("broker-a")
    b = nodes.start("broker-b")
    tx = TransactionService(b)
    tid = tx.send_half("PID_shop", Message("orders", b"x")).transaction_id
    tx.close()
    svc = nodes.endpoints["broker-b:0"].tx
    assert svc.discard(svc.locate(tid), "max checks", 0) == "discarded"
    sign_in(page, "operator")
    page.goto("/cluster/")
    row = page.locator(f"[data-testid=cluster-discarded] tr[data-tid='{tid}']")
    resume = row.locator("form", has=page.get_by_role("button", name="Resume"))
    resume.get_by_label(f"Reason to resume {tid}").fill("checker fixed, CHG-9")
    resume.get_by_role("button", name="Resume").click()
    assert f"Resumed {tid} on broker-b." in flash(page)
    assert svc.state(tid) == TransactionState.PENDING
    assert page.locator("[data-testid=cluster-discarded]").count() == 0


def test_an_admin_is_refused_a_topic_that_exists_and_a_node_that_is_gone(
    nodes, page, users, sign_in
) -> None:
    """The Create-a-topic form on a topic one master has already: that master
    refuses (409 topic_exists, shown, audited as failed, never resized) and
    the other creates it. Then a picked node whose admin API refuses
    connections: its pages are the 503 page with the one wording."""
    import socket

    from playwright.sync_api import expect

    from console.audit.models import AuditRecord

    a = nodes.start("broker-a")
    b = nodes.start("broker-b")
    a.create_topic("orders", 2, 2)
    sign_in(page, "admin")
    page.goto("/cluster/")
    form = page.locator("[data-testid=topic-form]")
    form.get_by_label("Topic name").fill("orders")
    form.get_by_label("Queues").fill("6")
    form.get_by_label("broker-a").check()
    form.get_by_label("broker-b").check()
    form.get_by_role("button", name="Create").click()
    error = page.locator(".flash-error")
    expect(error).to_contain_text(
        "Topic orders: broker-a: failed (409 topic_exists): topic 'orders' "
        "already exists; broker-b: created"
    )
    assert a.store.get_topic("orders").write_queue_nums == 2
    assert b.store.get_topic("orders").write_queue_nums == 6
    assert AuditRecord.objects.get(object_id="broker-a/orders").status == "failed"

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    nodes.register("broker-gone", f"http://127.0.0.1:{port}")
    page.goto("/topics/")
    page.locator("[data-testid=node-picker]").select_option("broker-gone")
    page.locator("[data-testid=pick-node]").click()
    expect(page.locator("[data-testid=node-unavailable-reason]")).to_have_text(
        f"node broker-gone (http://127.0.0.1:{port}) did not answer: connection refused"
    )
    expect(page.locator("h1")).to_have_text("The node did not answer")
