"""A transaction service that was running while its store was a slave checks
the halves replicated into it once the store is promoted (records that came
through the replica link, not through the service's own ledger)."""

from __future__ import annotations

import time

from broker_core import Broker, Message
from broker_core.ha import replica
from broker_core.transaction import CallableTransport, TransactionService


def test_replicated_half_is_checked_by_the_running_service(tmp_path):
    with Broker.open(str(tmp_path / "m")) as m, Broker.open(str(tmp_path / "s")) as s:
        mtx = TransactionService(m, transaction_timeout_ms=0, check_interval_ms=0)
        stx = TransactionService(s, transaction_timeout_ms=0, check_interval_ms=0)
        try:
            mtx.send_half("PG", Message("orders", b"x", keys="k1"))
            end = m.store.state.dispatched_pos
            seg = m.store.commitlog.segments.segment(0)
            replica.apply_chunk(s.store, 0, bytes(seg.view[0:end]))
            asked = []
            stx.checkers.set_default(CallableTransport(lambda req: asked.append(req)))
            time.sleep(0.05)
            result = stx.run_check(max_checks=10)
            assert result.checks_sent == 1 and len(asked) == 1
        finally:
            mtx.close()
            stx.close()
