"""A slave in its own process follows a master process: it catches up while
appends go on, resumes after the master is SIGKILLed and restarted, and ends
with the same log, queues, messages and index as the master."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest
from _hahelpers import (
    SETTINGS,
    assert_same_store,
    free_port,
    secret_file,
    slave_status,
    start_master,
    start_replicate,
    wait_for,
)

from broker_core import Broker
from broker_core.shared import read_commit_pos


def _stop(p: subprocess.Popen, sig: int = signal.SIGTERM) -> None:
    if p.poll() is None:
        p.send_signal(sig)
    p.wait(timeout=30)


def _done_end(p: subprocess.Popen[str], timeout: float = 120) -> int:
    assert p.stdout is not None
    line = p.stdout.readline().split()
    assert line and line[0] == "DONE", line
    return int(line[1])


def _caught_up(slave: Path, master: Path) -> bool:
    """The slave has applied everything the master's log holds, and says so."""
    end = read_commit_pos(master)
    st = slave_status(slave)
    return (
        bool(st)
        and st.get("replicated_offset") == end
        and read_commit_pos(slave) == end
    )


def _seqs(b: Broker) -> list[int]:
    out = []
    for topic in ("HA-A", "HA-B", "HA-C"):
        cfg = b.store.topic_config(topic)
        for q in range(cfg.queue_nums):
            for off, _size, _ in b.store.get_queue_units(topic, q, 0, 10**6):
                out.append(int(b.store.read_message(off).body[1:9]))
    return out


@pytest.mark.slow
def test_slave_process_catches_up_with_20k_messages_transactions_and_timers(
    tmp_path: Path,
) -> None:
    mdir, sdir, out = tmp_path / "master", tmp_path / "slave", tmp_path / "acts"
    secret = secret_file(tmp_path)
    addr = f"127.0.0.1:{free_port()}"
    master = start_master(
        mdir, addr, secret, out, count=20_000, batch=50, services=True, pause_s=0.01
    )
    slave = start_replicate(sdir, addr, secret)
    try:
        # The slave follows while the master is still appending.
        wait_for(
            lambda: slave_status(sdir).get("replicated_offset", 0) > 0,
            20,
            "the slave to replicate",
        )
        acts = [json.loads(x) for x in out.read_text().splitlines()]
        last = max(a["seq"] for a in acts if a["kind"] == "msg")
        assert last < 19_000, "the appends ended before the slave followed"
        _done_end(master)
        # Delayed messages go on being delivered (appended) for ~3 s after DONE.
        time.sleep(3.5)
        wait_for(lambda: _caught_up(sdir, mdir), 60, "the slave to catch up")
        time.sleep(1.5)  # a config-sync round and the stable end
        wait_for(lambda: _caught_up(sdir, mdir), 60, "the slave to catch up")
    finally:
        _stop(master)
        _stop(slave)
    acts = [json.loads(x) for x in out.read_text().splitlines()]
    with Broker.open(mdir, **SETTINGS) as m, Broker.open(sdir, **SETTINGS) as s:
        units = assert_same_store(m, s)
        assert units >= 20_000
        assert sorted(_seqs(s)) == list(range(20_000))
        # The key index follows on the slave.
        hit = s.query_by_key("HA-C", "k19997", 0, 2**62)
        assert [x.body[:9] for x in hit] == [b"m00019997"]
        assert sum(a["kind"] == "half" for a in acts) > 50
        delayed = {a["msg_id"] for a in acts if a["kind"] == "delayed"}
        got = [
            x.msg_id
            for q in range(s.store.topic_config("HA-D").queue_nums)
            for x in s.pull("probe", "HA-D", q, 0, 10_000).messages
        ]
        assert sorted(got) == sorted(delayed)
        # Topics with their queue counts came over by config sync.
        assert s.store.topic_config("HA-B").queue_nums == 8


@pytest.mark.slow
def test_sigkilled_master_restarts_and_the_slave_resumes_without_gaps_or_duplicates(
    tmp_path: Path,
) -> None:
    mdir, sdir, out = tmp_path / "master", tmp_path / "slave", tmp_path / "acts"
    secret = secret_file(tmp_path)
    addr = f"127.0.0.1:{free_port()}"
    master = start_master(mdir, addr, secret, out, count=-1, batch=20, pause_s=0.001)
    slave = start_replicate(sdir, addr, secret)
    try:
        wait_for(
            lambda: slave_status(sdir).get("replicated_offset", 0) > 600_000,
            60,
            "the slave to replicate 600 KB",
        )
        master.send_signal(signal.SIGKILL)  # mid-stream: it was still appending
        master.wait()
        wait_for(lambda: not slave_status(sdir).get("connected"), 20, "a disconnect")
        before = slave_status(sdir)["replicated_offset"]
        master = start_master(
            mdir, addr, secret, out, count=3000, batch=20, first=10_000_000
        )
        _done_end(master)
        wait_for(lambda: _caught_up(sdir, mdir), 60, "the slave to catch up")
        st = slave_status(sdir)
        assert st["connects"] >= 2 and st["replicated_offset"] > before
    finally:
        _stop(master)
        _stop(slave)
    acked = sum(
        a["n"]
        for a in map(json.loads, out.read_text().splitlines())
        if a["kind"] == "msg" and a["seq"] < 10**7
    )
    with Broker.open(mdir, **SETTINGS) as m, Broker.open(sdir, **SETTINGS) as s:
        assert_same_store(m, s)
        seqs = sorted(_seqs(s))
        first = [x for x in seqs if x < 10**7]
        # Whatever the killed master had appended, once each, none missing;
        # at least every batch it acknowledged.
        assert first == list(range(len(first))) and len(first) >= acked
        assert [x for x in seqs if x >= 10**7] == list(range(10**7, 10**7 + 3000))


@pytest.mark.slow
def test_sigkilled_slave_restarts_and_resumes_from_its_own_log(tmp_path: Path) -> None:
    mdir, sdir, out = tmp_path / "master", tmp_path / "slave", tmp_path / "acts"
    secret = secret_file(tmp_path)
    addr = f"127.0.0.1:{free_port()}"
    master = start_master(
        mdir, addr, secret, out, count=15_000, batch=20, pause_s=0.002
    )
    slave = start_replicate(sdir, addr, secret)
    try:
        wait_for(
            lambda: slave_status(sdir).get("replicated_offset", 0) > 400_000,
            60,
            "the slave to replicate 400 KB",
        )
        slave.send_signal(signal.SIGKILL)  # mid-apply, as likely as not
        slave.wait()
        slave = start_replicate(sdir, addr, secret)
        _done_end(master)
        wait_for(lambda: _caught_up(sdir, mdir), 60, "the slave to catch up")
    finally:
        _stop(master)
        _stop(slave)
    with Broker.open(mdir, **SETTINGS) as m, Broker.open(sdir, **SETTINGS) as s:
        assert_same_store(m, s)
        assert sorted(_seqs(s)) == list(range(15_000))


@pytest.mark.slow
def test_every_send_a_sync_master_acknowledged_is_on_its_slave(tmp_path: Path) -> None:
    mdir, sdir, out = tmp_path / "master", tmp_path / "slave", tmp_path / "acts"
    secret = secret_file(tmp_path)
    addr = f"127.0.0.1:{free_port()}"
    slave = start_replicate(sdir, addr, secret)
    master = start_master(mdir, addr, secret, out, count=-1, batch=10, sync=True)
    try:
        wait_for(
            lambda: out.exists() and len(out.read_text().splitlines()) > 500,
            60,
            "500 acknowledged batches",
        )
        master.send_signal(signal.SIGKILL)  # mid-stream
        master.wait()
    finally:
        _stop(master)
        _stop(slave)
    acked = [
        (a["seq"], a["n"])
        for a in map(json.loads, out.read_text().splitlines())
        if a["kind"] == "msg"
    ]
    with Broker.open(sdir, **SETTINGS) as s:
        have = set(_seqs(s))
    missing = [seq for seq, n in acked for j in range(seq, seq + n) if j not in have]
    assert not missing, f"{len(missing)} acknowledged messages not on the slave"
    assert len(acked) > 500
