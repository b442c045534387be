"""Promotion: the master process dies; its slave is promoted and resumes the
master's pending halves and timers from the replicated log, none lost and
none delivered twice, whether its copy of the delay progress is stale or gone."""

from __future__ import annotations

import json
import signal
import time
from collections import Counter
from pathlib import Path

import pytest
from _hahelpers import SECRET, SETTINGS, free_port, secret_file, start_master, wait_for

from broker_core import Broker
from broker_core.ha import SlaveFollower, read_role
from broker_core.schedule import DelayService
from broker_core.shared import read_commit_pos
from broker_core.transaction import (
    CallableTransport,
    TransactionService,
    TransactionState,
)


def _ids(b: Broker, topic: str) -> Counter[str]:
    cfg = b.store.topic_config(topic)
    out: Counter[str] = Counter()
    if cfg is None:
        return out
    for q in range(cfg.queue_nums):
        out.update(m.msg_id for m in b.pull("probe", topic, q, 0, 100_000).messages)
    return out


@pytest.mark.slow
@pytest.mark.parametrize("progress", ["synced", "deleted"])
def test_promoted_slave_resumes_halves_and_timers_exactly_once(
    tmp_path: Path, progress: str
) -> None:
    mdir, sdir, out = tmp_path / "master", tmp_path / "slave", tmp_path / "acts"
    addr = f"127.0.0.1:{free_port()}"
    slave = Broker.open(sdir, **SETTINGS)
    follower = SlaveFollower(slave.store, addr, SECRET).start()
    master = start_master(
        mdir, addr, secret_file(tmp_path), out,
        count=3000, batch=20, pause_s=0.01, services=True, final_delay_ms=4000,
    )  # fmt: skip
    try:
        assert master.stdout is not None
        assert master.stdout.readline().startswith("DONE")
        wait_for(
            lambda: _ids(slave, "HA-D"), 10, "a delivery by the master, replicated"
        )
        end = read_commit_pos(mdir)
        wait_for(lambda: slave.store.max_physical_offset() >= end, 20, "catch-up")
        master.send_signal(signal.SIGKILL)
        master.wait()
        acts = [json.loads(x) for x in out.read_text().splitlines()]
        delayed = {a["msg_id"] for a in acts if a["kind"] == "delayed"}
        halves = {a["tid"]: a["fate"] for a in acts if a["kind"] == "half"}
        before = _ids(slave, "HA-D")
        assert 0 < len(before) < len(delayed), "timers both delivered and pending"
        assert set(halves.values()) == {"pending", "commit", "rollback"}

        # The master's progress came over (a cache, older than the log).
        assert (sdir / "config" / "delayOffset.json").exists()
        rec = follower.promote()
        assert rec["role"] == "ASYNC_MASTER" == read_role(sdir)["role"]
        if progress == "deleted":
            (sdir / "config" / "delayOffset.json").unlink(missing_ok=True)
        # The services start on the promoted store and recover from its log.
        tx = TransactionService(slave, transaction_timeout_ms=60_000)
        try:
            for tid, fate in halves.items():
                want = {
                    "pending": TransactionState.PENDING,
                    "commit": TransactionState.COMMITTED,
                    "rollback": TransactionState.ROLLED_BACK,
                }[fate]
                assert tx.state(tid) is want, (tid, fate)
            pending = {h.transaction_id for h in tx.list_halves().items}
            assert pending == {t for t, f in halves.items() if f == "pending"}
            # Checkable: the check asks the producer, which commits them.
            tx.checkers.set_default(CallableTransport(lambda req: "COMMIT"))
            res = tx.run_check(now_ms=int(time.time() * 1000) + 120_000)
            assert res.answers == {"COMMIT": len(pending)}
            assert all(tx.state(t) is TransactionState.COMMITTED for t in pending)
        finally:
            tx.close()
        committed = _ids(slave, "HA-T")
        assert sum(committed.values()) == sum(f != "rollback" for f in halves.values())
        assert max(committed.values()) == 1

        ds = DelayService(slave)
        try:
            deadline = time.monotonic() + 20
            while set(_ids(slave, "HA-D")) != delayed and time.monotonic() < deadline:
                ds.deliver_due(budget_s=0.2)
            # Everything is due now: one more pass must deliver nothing again.
            ds.deliver_due(budget_s=0.3)
        finally:
            ds.close()
        got = _ids(slave, "HA-D")
        assert set(got) == delayed, f"lost: {len(delayed - set(got))}"
        dupes = {k: n for k, n in got.items() if n > 1}
        assert not dupes, f"delivered twice: {len(dupes)}"
    finally:
        follower.stop()
        if master.poll() is None:
            master.kill()
            master.wait()
        slave.close()
