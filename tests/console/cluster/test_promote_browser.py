"""The Promote form of the Cluster page in Chromium, over real node processes
(a master with its replication listener and its slave, ``test_promote.py``'s
pair): once the master is gone, an admin picks the role, gives the reason and
types PROMOTE; the slave is a master that takes writes."""

from __future__ import annotations

import pytest
from rocketmq.grpc_protocol import definition_pb2 as pb

from console.audit.models import AuditRecord
from tests.console.cluster.test_promote import EXPIRY_S, _wait, pair  # noqa: F401

pytestmark = [
    pytest.mark.browser,
    pytest.mark.services,
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True),
]


def test_an_admin_promotes_the_slave_in_the_browser(pair, page, users, sign_in):  # noqa: F811
    master, slave, registry = pair
    assert master.send("orders", b"before").status.code == pb.OK
    end = master.status()["log_end"]
    _wait(lambda: slave.status()["log_end"] >= end, 30, "the slave caught up")
    master.kill()
    _wait(lambda: registry.find("broker-a", 0) is None, 3 * EXPIRY_S, "expiry")

    sign_in(page, "admin")
    page.goto("/cluster/")
    form = page.locator("[data-testid=promote-form]")
    assert form.count() == 1
    form.get_by_label("New role of broker-a:1").select_option("ASYNC_MASTER")
    form.get_by_label("Reason to promote broker-a:1").fill("host a0 lost, INC-12")
    form.get_by_label("Confirm promotion of broker-a:1").fill("PROMOTE")
    form.get_by_role("button", name="Promote").click()
    flash = page.locator(".flash").first.inner_text()
    assert "broker-a:1 is now a ASYNC_MASTER" in flash, flash
    assert slave.status()["role"] == "ASYNC_MASTER"
    assert slave.send("orders", b"after").status.code == pb.OK
    record = AuditRecord.objects.filter(action="cluster.promote").latest("id")
    assert record.status == AuditRecord.Status.SUCCESS
    assert record.reason == "host a0 lost, INC-12"
