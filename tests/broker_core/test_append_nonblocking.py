"""A non-blocking append (the gRPC endpoint's fast path on its event loop)
refuses at once, storing nothing, while another process holds the append lock,
and succeeds once it is free; sync flush mode never appends without waiting."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from broker_core import Broker, Message
from broker_core.errors import AppendBusyError

HOLDER = """
import sys, time
from broker_core import Broker
with Broker.open(sys.argv[1]) as b:
    with b.store.exclusive_appends():
        print("locked", flush=True)
        sys.stdin.readline()
"""


def test_non_blocking_append_refuses_while_another_process_holds_the_lock(
    tmp_path,
) -> None:
    from tests.conftest import ROOT

    store = tmp_path / "store"
    with Broker.open(store) as b:  # opened first: opening takes the lock too
        b.create_topic("Busy", read_queue_nums=1)
        holder = subprocess.Popen(
            [sys.executable, "-c", HOLDER, str(store)], cwd=ROOT,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            assert holder.stdout is not None and holder.stdin is not None
            assert holder.stdout.readline().strip() == "locked"
            t0 = time.monotonic()
            with pytest.raises(AppendBusyError):
                b.send_batch([Message("Busy", b"x")], blocking=False)
            assert time.monotonic() - t0 < 0.5
            assert b.store.max_offset("Busy", 0) == 0
            holder.stdin.write("\n")
            holder.stdin.flush()
            holder.wait(timeout=10)
            r = b.send_batch([Message("Busy", b"y")], blocking=False)
            assert r[0].queue_offset == 0
            assert b.store.max_offset("Busy", 0) == 1
        finally:
            if holder.poll() is None:
                holder.kill()


def test_sync_flush_never_appends_without_waiting(tmp_path) -> None:
    with Broker.open(tmp_path / "store", flush="sync") as b:
        b.create_topic("Synced", read_queue_nums=1)
        with pytest.raises(AppendBusyError):
            b.send_batch([Message("Synced", b"x")], blocking=False)
        assert b.send_batch([Message("Synced", b"x")])[0].queue_offset == 0
