"""A check-back that reaches nobody does not count against the maximum checks.

A half whose producer is gone is checked every interval by ``serve
--embedded-timers``; while no producer of its topic is online the checks are
recorded ("no producer online") with the count left as it was. When a
producer comes back with a checker (the official Python client), the next
check reaches it, counts, and its answer resolves the half.
"""

from __future__ import annotations

import time

import pytest

from tests.endpoint_server import result, spawn, start_server, stop_server
from tests.support import free_port

pytestmark = [pytest.mark.protocol, pytest.mark.slow]


def _checks(tx, tid):
    detail = tx.get_half(tid)
    return detail, [e for e in detail.history if e.kind == "CHECK"]


def test_checks_count_only_once_they_reach_a_producer(tmp_path):
    from broker_core import Broker
    from broker_core.transaction import (
        ResolutionSource,
        TransactionService,
        TransactionState,
    )

    store = tmp_path / "store"
    port = free_port()
    # Transaction timeout 1 s, a check every 2 s (see start_server).
    proc = start_server(store, port, tmp_path / "server.log")
    try:
        ep = f"127.0.0.1:{port}"
        tid = result(spawn("orphan_half", ep, "n", tmp_path))["tx"]
        # The server's settings: whichever process folds a check into the
        # shared index sets its next due time with its own interval.
        with (
            Broker.open(store) as b,
            TransactionService(
                b, transaction_timeout_ms=1000, check_interval_ms=2000
            ) as tx,
        ):
            deadline = time.time() + 40
            detail, checks = _checks(tx, tid)
            while len(checks) < 3 and time.time() < deadline:
                time.sleep(0.3)
                detail, checks = _checks(tx, tid)
            assert len(checks) >= 3, detail.history
            assert detail.info.state is TransactionState.PENDING
            assert detail.info.check_count == 0
            assert all(e.check_no is None and e.answer == "FAILED" for e in checks)
            assert all("no producer online" in e.detail for e in checks)
            missed = len(checks)
            assert tx.metrics().checks_no_producer >= missed

            back = result(spawn("checker_back", ep, "n", tmp_path))
            assert back["checked"] == ["orphan"]
            deadline = time.time() + 15
            while (
                tx.state(tid) is not TransactionState.COMMITTED
                and time.time() < deadline
            ):
                time.sleep(0.2)
            detail, checks = _checks(tx, tid)
            assert detail.info.state is TransactionState.COMMITTED
            assert detail.info.outcome_source is ResolutionSource.CHECK
            # The one check that reached the producer is the first to count.
            delivered = [e for e in checks if e.check_no is not None]
            assert [(e.check_no, e.answer) for e in delivered] == [(1, "SENT")]
            assert detail.info.check_count == 1
            assert len(checks) - len(delivered) >= missed
    finally:
        assert stop_server(proc) == 0
