"""The console's Cluster page over real nodes (stores with their admin API on
127.0.0.1, a real route registry): every node is asked at once, and a node
that never answers is named on the page without holding it up per node."""

from __future__ import annotations

import time

import pytest

from broker_core import Message
from broker_core.transaction import TransactionService

pytestmark = [pytest.mark.services, pytest.mark.django_db]


def test_silent_nodes_are_asked_at_once_and_named(nodes, client_as, settings):
    settings.CLUSTER_ADMIN_TIMEOUT_S = 1.0
    broker = nodes.start("broker-a")
    tx = TransactionService(broker)
    tid = tx.send_half("PID_shop", Message("orders", b"x", keys="k1")).transaction_id
    tx.close()
    names = [f"broker-s{i}" for i in range(3)]
    silent = nodes.silent(*names)

    started = time.monotonic()
    r = client_as("viewer").get("/cluster/")
    elapsed = time.monotonic() - started
    body = r.content.decode()

    assert r.status_code == 200
    # The live master's half is listed; each silent node is named, not dropped.
    assert f'data-tid="{tid}" data-node="broker-a"' in body
    for name in names:
        assert f"Not reachable: {name} (ASYNC_MASTER)" in body
        assert f'data-node="{name}:0"' in body
    # The three silent nodes held their requests open at the same time: their
    # timeouts overlap (one total wait for the page), they do not add up.
    assert silent.most_open == 3
    assert elapsed < 3 * settings.CLUSTER_ADMIN_TIMEOUT_S, elapsed
