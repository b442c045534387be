"""The Cluster page in Chromium over real nodes (stores with their admin API
on 127.0.0.1, a real route registry): an admin sees every table and form of a
two-master cluster with a slave, and the page fits the window."""

from __future__ import annotations

import pytest

from broker_core import Message
from broker_core.transaction import TransactionService

pytestmark = [
    pytest.mark.browser,
    pytest.mark.services,
    pytest.mark.django_db(transaction=True),
]


def test_the_cluster_page_fits_and_shows_every_part(nodes, page, sign_in, screenshot):
    a = nodes.start("broker-a")
    b = nodes.start("broker-b")
    nodes.start("broker-a", role="SLAVE", broker_id=1)
    for broker in (a, b):
        broker.create_topic("orders", 2)
        tx = TransactionService(broker)
        tx.send_half("PID_shop", Message("orders", b"x", keys="order-with-a-long-key"))
        tx.close()
        broker.send(Message("orders", b"y"))
        broker.commit_offset("GID_billing", "orders", 0, 0)
    nodes.endpoints["broker-a:0"].delays.send_delayed(Message("orders", b"d"), level=5)
    sign_in(page, "admin")
    page.goto("/cluster/")
    for part in ("node-list", "cluster-halves", "cluster-lag", "cluster-delays",
                 "search-form", "reset-form", "cancel-form", "topic-form",
                 "promote-form"):  # fmt: skip
        assert page.locator(f"[data-testid={part}]").count() >= 1, part
    assert page.locator("[data-testid=cluster-halves] tbody tr").count() == 2
    width = page.evaluate("document.documentElement.scrollWidth")
    window = page.evaluate("window.innerWidth")
    screenshot(page, "cluster-page")
    assert width <= window, f"the page is {width} px wide in a {window} px window"


def test_a_node_page_fits_the_window(nodes, page, sign_in, screenshot):
    from broker_core.endpoint.clients import ClientInfo

    a = nodes.start("broker-a")
    nodes.start("broker-a", role="SLAVE", broker_id=1)
    for i in range(3):
        a.create_topic(f"orders-with-a-long-topic-name-{i}", 8)
        a.send(Message(f"orders-with-a-long-topic-name-{i}", b"y"))
        a.commit_offset(f"GID_billing_{i}", f"orders-with-a-long-topic-name-{i}", 0, 0)
    # Clients as the endpoint records them, with long ids and many topics.
    ep = nodes.endpoints["broker-a:0"]
    for i in range(3):
        cid = f"10.0.0.{i}@12345#1234567890#producer-with-a-long-instance-name-{i}"
        ep.clients[cid] = ClientInfo(
            cid, client_type="PRODUCER", language="JAVA", version="5.0.7",
            topics=[f"orders-with-a-long-topic-name-{j}" for j in range(3)],
        )  # fmt: skip
    ep.delays.send_delayed(Message("orders-with-a-long-topic-name-0", b"d"), level=5)
    sign_in(page, "viewer")
    page.goto("/cluster/")
    page.click("[data-testid=node-link] >> text=broker-a >> nth=0")
    page.wait_for_url("**/cluster/nodes/broker-a:0/")
    for part in ("node-status", "node-metrics", "node-topics", "node-clients",
                 "node-lag", "node-delays"):  # fmt: skip
        assert page.locator(f"[data-testid={part}]").count() == 1, part
    assert page.locator("[data-testid=node-clients] tbody tr").count() == 3
    width = page.evaluate("document.documentElement.scrollWidth")
    window = page.evaluate("window.innerWidth")
    screenshot(page, "cluster-node-page")
    assert width <= window, f"the page is {width} px wide in a {window} px window"


def test_an_operator_picks_a_node_and_rolls_back_its_half(
    nodes, page, sign_in, screenshot, broker
):
    """The single-store pages in Chromium: the picker in the banner switches
    the Transactions page to broker-b's store, and a roll back there lands in
    broker-b's log; the page fits the window with the picker."""
    nodes.start("broker-a")
    b = nodes.start("broker-b")
    tx = TransactionService(b)
    tid = tx.send_half("PID_b", Message("orders", b"x", keys="on-b")).transaction_id
    tx.close()
    sign_in(page, "operator")
    page.goto("/transactions/")
    assert page.locator(f"text={tid}").count() == 0  # the console's own store
    page.select_option("[data-testid=node-picker]", "broker-b")
    page.click("[data-testid=pick-node]")
    page.wait_for_url("**/transactions/")
    assert page.locator("[data-testid=scope-node]").inner_text() == "broker-b"
    page.click(f"a[href='/transactions/{tid}/']")
    page.wait_for_url(f"**/transactions/{tid}/")
    rollback = page.locator("form.actionrow", has_text="Roll back")
    rollback.locator("input[name=reason]").fill("stuck at 3 a.m.")
    page.once("dialog", lambda d: d.accept())
    rollback.locator("button[type=submit]").click()
    page.wait_for_selector("text=Rolled back")
    tx = TransactionService(b)
    assert tx.get_half(tid).info.state.value == "ROLLED_BACK"
    tx.close()
    page.goto("/transactions/")
    width = page.evaluate("document.documentElement.scrollWidth")
    window = page.evaluate("window.innerWidth")
    screenshot(page, "transactions-picked-node")
    assert width <= window, f"the page is {width} px wide in a {window} px window"
