"""The console over a real cluster (network namespaces: a registry, broker-a
with its slave, broker-b), in headless Chromium: the cluster page lists the
pending halves of both masters, an admin commits one on broker-b and rolls
one back on broker-a, each through that node's admin API and
audited, and the slave's replication lag is shown."""

from __future__ import annotations

import time

import pytest

from broker_core import Broker, Message
from broker_core.transaction import TransactionService
from tests.netns import Cluster, Network, netns_unavailable

pytestmark = [
    pytest.mark.browser,
    pytest.mark.services,
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True),
]

TOKEN = "console-cluster-token"


def _halves(store, host, keys):
    # Ids carry the store's host: the node's own (serve --cluster sets it).
    with Broker.open(str(store), store_host=f"{host.address}:8081") as b:
        tx = TransactionService(b)
        ids = {
            k: tx.send_half("PID_shop", Message("orders", b"x", keys=k)).transaction_id
            for k in keys
        }
        tx.close()
    return ids


@pytest.fixture
def cluster(tmp_path, settings):
    why = netns_unavailable()
    if why:
        pytest.skip(why)
    net = Network()
    try:
        c = Cluster(net, tmp_path, "orders", 3.0)
        token = tmp_path / "admin.token"
        token.write_text(TOKEN)
        secret = tmp_path / "ha.secret"
        secret.write_text("console-cluster-secret")
        a, b = c.store("a"), c.store("b")
        ids = {
            "broker-a": _halves(a, c.a, ["a1", "a2"]),
            "broker-b": _halves(b, c.b, ["b1"]),
        }

        def admin(host):
            return ["--admin-listen", f"{host.address}:9081",
                    "--admin-token-file", str(token)]  # fmt: skip

        c.serve(c.a, a, "broker-a", "--ha-listen", f"{c.a.address}:10912",
                "--ha-secret-file", str(secret), *admin(c.a))  # fmt: skip
        c.serve(c.b, b, "broker-b", *admin(c.b))
        c.serve(c.s, c.store("s", None), "broker-a", "--broker-id", "1",
                "--master-ha", f"{c.a.address}:10912", "--ha-secret-file",
                str(secret), *admin(c.s))  # fmt: skip
        c.wait_nodes({"broker-a:0", "broker-a:1", "broker-b:0"})
        settings.BROKER_CLUSTER = "c1"
        settings.REGISTRY_URL = c.registry_url
        settings.CLUSTER_ADMIN_TOKEN_FILE = str(token)
        yield c, ids
    finally:
        net.close()


def test_console_manages_halves_on_both_masters(
    page, users, sign_in, cluster, screenshot
):
    from console.audit.models import AuditRecord

    c, ids = cluster
    page.on("dialog", lambda d: d.accept())
    sign_in(page, "admin")
    page.get_by_role("link", name="Cluster", exact=True).click()
    rows = page.locator("[data-testid=cluster-halves] tbody tr")
    assert rows.count() == 3
    nodes = {rows.nth(i).get_attribute("data-node") for i in range(3)}
    assert nodes == {"broker-a", "broker-b"}
    # The slave's lag is shown on its row (its master's row names the slave).
    deadline = time.monotonic() + 15
    while "lag 0 bytes" not in page.locator("[data-node='broker-a:1']").inner_text():
        assert time.monotonic() < deadline, page.locator(
            "[data-testid=node-list]"
        ).inner_text()
        page.reload()
    assert "slave" in page.locator("[data-node='broker-a:0']").inner_text()
    screenshot(page, "cluster")

    # An admin commits broker-b's half.
    b1 = ids["broker-b"]["b1"]
    row = page.locator(f"tr[data-node='broker-b'][data-tid='{b1}']")
    row.get_by_placeholder("type COMMIT").fill("COMMIT")
    row.get_by_role("button", name="Commit").click()
    assert f"Committed {b1} on broker-b" in page.locator(".flash").inner_text()

    # And rolls back one of broker-a's (an operator may too; commit is admin's).
    a1 = ids["broker-a"]["a1"]
    row = page.locator(f"tr[data-node='broker-a'][data-tid='{a1}']")
    row.get_by_placeholder("reason (audited)").fill("duplicate order")
    row.get_by_role("button", name="Roll back").click()
    assert f"Rolled back {a1} on broker-a" in page.locator(".flash").inner_text()
    left = page.locator("[data-testid=cluster-halves] tbody tr")
    assert [left.nth(i).get_attribute("data-tid") for i in range(left.count())] == [
        ids["broker-a"]["a2"]
    ]
    # A topic created on broker-b only, with 2 queues: routes follow.
    form = page.locator("[data-testid=topic-form]")
    form.get_by_label("Topic name").fill("payments")
    form.get_by_label("Queues").fill("2")
    form.get_by_label("broker-b").check()
    form.get_by_role("button", name="Create").click()
    assert "Topic payments: broker-b: created" in page.locator(".flash").inner_text()
    from broker_core.cluster import RouteRegistry

    route = RouteRegistry(c.registry_url, "c1").route("payments")
    assert sorted((e.node.name, e.queue_id) for e in route) == [
        ("broker-b", 0), ("broker-b", 1)
    ]  # fmt: skip
    audits = {
        (r.action, r.object_id, r.reason, r.status)
        for r in AuditRecord.objects.filter(object_type="transaction")
    }
    assert ("transaction.commit", f"broker-b/{b1}", "", "success") in audits
    assert ("topic.create", "broker-b/payments", "", "success") in {
        (r.action, r.object_id, r.reason, r.status)
        for r in AuditRecord.objects.filter(object_type="topic")
    }
    assert (
        "transaction.rollback",
        f"broker-a/{a1}",
        "duplicate order",
        "success",
    ) in audits
