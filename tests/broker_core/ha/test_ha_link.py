"""One master and one slave over loopback, in this process: who may follow,
what SYNC_MASTER waits for, what config sync carries, and a slave that is
ahead of its restarted master."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from _hahelpers import SECRET, SETTINGS, assert_same_store, wait_for

from broker_core import Broker, Message
from broker_core.errors import ReplicaReadOnlyError, ReplicationError
from broker_core.ha import HAServer, Role, SlaveFollower, read_role, start_ha_server


def _send(b: Broker, n: int, start: int = 0) -> int:
    """Send ``n`` messages over three topics; return the log end after them."""
    rs = b.send_batch(
        [
            Message(("A", "B", "C")[i % 3], b"body-%d" % i * 7, keys=f"k{i}")
            for i in range(start, start + n)
        ]
    )
    assert rs[-1].commit_log_offset < b.store.max_physical_offset()
    return b.store.max_physical_offset()


@pytest.fixture
def master(tmp_path: Path) -> Iterator[Broker]:
    b = Broker.open(tmp_path / "master", **SETTINGS)
    yield b
    b.close()


@pytest.fixture
def slave(tmp_path: Path) -> Iterator[Broker]:
    b = Broker.open(tmp_path / "slave", **SETTINGS)
    yield b
    b.close()


@pytest.fixture
def server(master: Broker) -> Iterator[HAServer]:
    srv = start_ha_server(master.store, "127.0.0.1:0", SECRET)
    yield srv
    srv.stop()


def _follow(slave: Broker, server: HAServer, secret: bytes = SECRET) -> SlaveFollower:
    return SlaveFollower(slave.store, server.address, secret).start()


def test_a_slave_without_the_secret_is_refused(
    master: Broker, slave: Broker, server: HAServer
) -> None:
    _send(master, 100)
    f = _follow(slave, server, b"not-the-secret-at-all")
    try:
        wait_for(lambda: f.status()["last_error"], 10, "a refusal")
        assert "authentication failed" in f.status()["last_error"]
        assert slave.store.max_physical_offset() == 0
        assert server.replication_status() == []
    finally:
        f.stop()


def test_a_master_without_the_secret_is_not_followed(
    master: Broker, slave: Broker, tmp_path: Path
) -> None:
    _send(master, 100)
    # The master holds another secret: it refuses the slave's proof, and a
    # slave never takes a master's bytes without the master's proof either.
    srv = start_ha_server(master.store, "127.0.0.1:0", b"y" * 32)
    f = _follow(slave, srv)
    try:
        wait_for(lambda: f.status()["last_error"], 10, "a refusal")
        assert slave.store.max_physical_offset() == 0
    finally:
        f.stop()
        srv.stop()


def test_a_slave_with_another_segment_size_is_refused(
    master: Broker, server: HAServer, tmp_path: Path
) -> None:
    _send(master, 100)
    other = Broker.open(tmp_path / "other", **{**SETTINGS, "segment_size": 128 * 1024})
    f = SlaveFollower(other.store, server.address, SECRET).start()
    try:
        wait_for(lambda: f.status()["last_error"], 10, "a refusal")
        assert "segment size 131072 is not 65536" in f.status()["last_error"]
        assert other.store.max_physical_offset() == 0
    finally:
        f.stop()
        other.close()


def test_wait_replicated_is_true_once_the_slave_applied_and_false_without_it(
    master: Broker, slave: Broker, server: HAServer
) -> None:
    f = _follow(slave, server)
    try:
        wait_for(lambda: server.replication_status(), 10, "the slave to connect")
        for i in range(20):
            r = master.send(Message("A", b"sync-%d" % i, keys=f"s{i}"))
            end = (
                r.commit_log_offset
                + master.store.read_message(r.commit_log_offset).store_size
            )
            assert server.wait_replicated(end, 5.0)
            # Acknowledged: the slave has it, readable through its queue.
            assert slave.store.max_physical_offset() >= end
            got = slave.pull("g", "A", r.queue_id, r.queue_offset, 1).messages
            assert [m.body for m in got] == [b"sync-%d" % i]
        st = server.replication_status()
        assert len(st) == 1 and st[0]["lag_bytes"] == 0 and st[0]["acked_offset"] == end
        f.stop()
        wait_for(lambda: not server.replication_status(), 10, "the slave to go")
        r = master.send(Message("A", b"lonely"))
        assert not server.wait_replicated(r.commit_log_offset + 1, 0.3)
        assert slave.store.max_physical_offset() <= r.commit_log_offset
    finally:
        f.stop()


def test_wait_replicated_times_out_while_the_slave_has_not_applied(
    master: Broker, slave: Broker, server: HAServer
) -> None:
    f = _follow(slave, server)
    try:
        wait_for(lambda: server.replication_status(), 10, "the slave to connect")
        # The slave's appends wait for its append lock, held here.
        with slave.store.state.append_lock:
            r = master.send(Message("A", b"held"))
            assert not server.wait_replicated(r.commit_log_offset + 1, 0.5)
        assert server.wait_replicated(r.commit_log_offset + 1, 5.0)
    finally:
        f.stop()


def test_offsets_topics_and_delay_progress_reach_the_slave(
    master: Broker, slave: Broker, server: HAServer
) -> None:
    f = _follow(slave, server)
    try:
        _send(master, 300)
        master.create_topic("Seven", read_queue_nums=7)
        master.commit_offset("billing", "A", 0, 20)
        master.store.persist_offsets()
        wait_for(
            lambda: slave.committed_offset("billing", "A", 0) == 20,
            10,
            "the offset on the slave",
        )
        wait_for(
            lambda: (cfg := slave.store.topic_config("Seven")) and cfg.queue_nums == 7,
            10,
            "the topic on the slave",
        )
        master.commit_offset("billing", "A", 0, 24)
        master.store.persist_offsets()
        wait_for(
            lambda: slave.committed_offset("billing", "A", 0) == 24, 10, "an update"
        )
        assert f.status()["config_applied"]["consumerOffset.json"] >= 2
    finally:
        f.stop()


def test_delay_progress_waits_for_the_log_it_describes(
    master: Broker, slave: Broker, tmp_path: Path
) -> None:
    from broker_core.ha.configsync import ConfigApplier

    _send(master, 10)
    applier = ConfigApplier(slave.store)
    progress = {"offsetTable": {"1": 3}, "logPos": 5000}
    applier.apply("delayOffset.json", progress, log_end=100)
    path = slave.store.root / "config" / "delayOffset.json"
    assert not path.exists()
    applier.log_advanced(5000)
    assert path.exists()
    with pytest.raises(ReplicationError):
        applier.apply("secrets.json", {}, 0)


def test_a_slave_ahead_of_its_restarted_master_is_cut_back(tmp_path: Path) -> None:
    mdir, copy = tmp_path / "master", tmp_path / "short"
    with Broker.open(mdir, **SETTINGS) as m:
        short_end = _send(m, 1500)
    shutil.copytree(mdir, copy)  # the master's disk as it was at 1500
    slave = Broker.open(tmp_path / "slave", **SETTINGS)
    try:
        with Broker.open(mdir, **SETTINGS) as m:
            srv = start_ha_server(m.store, "127.0.0.1:0", SECRET)
            f = _follow(slave, srv)
            long_end = _send(m, 1500, start=1500)
            wait_for(
                lambda: slave.store.max_physical_offset() == long_end, 20, "catch-up"
            )
            f.stop()
            srv.stop()
        # The master comes back with the shorter log: the slave is cut to it,
        # then follows what the master appends from there.
        with Broker.open(copy, **SETTINGS) as m:
            srv = start_ha_server(m.store, "127.0.0.1:0", SECRET)
            f = _follow(slave, srv)
            wait_for(lambda: f.status()["truncations"] == 1, 20, "the cut")
            assert slave.store.max_physical_offset() == short_end
            assert slave.query_by_key("C", "k2000", 0, 2**62) == []
            end = _send(m, 700, start=5000)
            wait_for(lambda: slave.store.max_physical_offset() == end, 20, "catch-up")
            f.stop()
            srv.stop()
            assert_same_store(m, slave)
            assert [x.body for x in slave.query_by_key("B", "k5000", 0, 2**62)] == []
            hits = slave.query_by_key("C", "k5000", 0, 2**62)
            assert [x.body for x in hits] == [b"body-5000" * 7]
    finally:
        slave.close()


def test_promotion_marks_the_store_writable(
    master: Broker, slave: Broker, server: HAServer
) -> None:
    f = _follow(slave, server)
    end = _send(master, 50)
    wait_for(lambda: slave.store.max_physical_offset() == end, 10, "catch-up")
    assert read_role(slave.store.root)["role"] == "SLAVE"
    # A slave takes appends from its master only, in every process.
    with pytest.raises(ReplicaReadOnlyError):
        slave.send(Message("A", b"too early"))
    with Broker.open(slave.store.root, **SETTINGS) as other:
        with pytest.raises(ReplicaReadOnlyError):
            other.send(Message("A", b"too early"))
    rec = f.promote(Role.SYNC_MASTER)
    assert rec["role"] == "SYNC_MASTER" and rec["promoted_at_offset"] == end
    assert read_role(slave.store.root)["role"] == "SYNC_MASTER"
    r = slave.send(Message("A", b"after"))
    assert r.commit_log_offset == end
    assert slave.store.read_message(end).body == b"after"
    wait_for(lambda: not server.replication_status(), 10, "the link to close")


def _same_size(b: Broker, n: int, tag: bytes) -> int:
    b.send_batch([Message("A", tag + b"%06d" % i, queue_id=0) for i in range(n)])
    return b.store.max_physical_offset()


def test_a_slave_whose_log_diverged_at_a_common_boundary_is_refused(
    tmp_path: Path,
) -> None:
    """The master lost its tail and appended past the slave's end: with records
    of one size the slave's end is a boundary of both logs, but not the same
    record below it."""
    mdir, copy = tmp_path / "master", tmp_path / "short"
    with Broker.open(mdir, **SETTINGS) as m:
        m.create_topic("A", 1)
        _same_size(m, 300, b"old-")
    shutil.copytree(mdir, copy)
    slave = Broker.open(tmp_path / "slave", **SETTINGS)
    try:
        with Broker.open(mdir, **SETTINGS) as m:
            srv = start_ha_server(m.store, "127.0.0.1:0", SECRET)
            f = _follow(slave, srv)
            end = _same_size(m, 200, b"gone")
            wait_for(lambda: slave.store.max_physical_offset() == end, 20, "catch-up")
            f.stop()
            srv.stop()
        with Broker.open(copy, **SETTINGS) as m:
            longer = _same_size(m, 400, b"new-")
            assert longer > end
            srv = start_ha_server(m.store, "127.0.0.1:0", SECRET)
            f = _follow(slave, srv)
            try:
                wait_for(lambda: f.status()["last_error"], 10, "a refusal")
                err = f.status()["last_error"]
                assert "slave's record at" in err and "diverged" in err
                assert slave.store.max_physical_offset() == end
            finally:
                f.stop()
                srv.stop()
    finally:
        slave.close()


def test_a_slave_ahead_with_another_history_is_not_cut_back(tmp_path: Path) -> None:
    with Broker.open(tmp_path / "master", **SETTINGS) as m:
        _send(m, 200)
        srv = start_ha_server(m.store, "127.0.0.1:0", SECRET)
        # Another master's log, longer: cutting it back would keep a prefix
        # that is not this master's.
        with Broker.open(tmp_path / "slave", **SETTINGS) as s:
            _send(s, 600, start=10_000)
            before = s.store.max_physical_offset()
            f = _follow(s, srv)
            try:
                wait_for(lambda: f.status()["last_error"], 10, "a refusal")
                assert "diverged" in f.status()["last_error"]
                assert s.store.max_physical_offset() == before
                assert f.status()["truncations"] == 0
            finally:
                f.stop()
        srv.stop()
