"""Epochs: the failover an ASYNC master's slave survives. Master A dies with
records its slave B never got; B is promoted and takes writes; A comes back as
B's slave: its epochs say where its log parts from B's, it cuts its tail there
and follows B. Without epochs on either side it behaves as before: cut back
when merely ahead, refused when the logs diverged."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from _hahelpers import (
    ROOT,
    SECRET,
    SETTINGS,
    assert_same_store,
    free_port,
    secret_file,
    slave_status,
    start_master,
    start_replicate,
    wait_for,
)

from broker_core import Broker, Message
from broker_core.ha import SlaveFollower, read_role, start_ha_server
from broker_core.ha.epochs import (
    EPOCH_FILE,
    Epoch,
    consistent_end,
    parse_epochs,
    read_epochs,
)
from broker_core.ha.replica import cut_tails
from broker_core.shared import read_commit_pos

TOPICS = (("E-A", 4), ("E-B", 2))


def _send(b: Broker, n: int, tag: str) -> int:
    """Send ``n`` messages keyed ``{tag}{i}`` over two topics; return the log end."""
    b.send_batch(
        [
            Message(
                TOPICS[i % 2][0],
                f"{tag}-{i}-".encode() * (1 + i % 5),
                keys=f"{tag}{i}",
                queue_id=i % TOPICS[i % 2][1],
            )
            for i in range(n)
        ]
    )
    return b.store.max_physical_offset()


def _bodies(b: Broker) -> list[bytes]:
    out = []
    for topic, n in TOPICS:
        for q in range(n):
            out += [m.body for m in b.pull("probe", topic, q, 0, 100_000).messages]
    return sorted(out)


def _ids(b: Broker) -> list[tuple[int, str]]:
    return [(m.commit_log_offset, m.msg_id) for m in b.store.iter_messages()]


def test_consistent_end_is_where_the_last_shared_epoch_ends() -> None:
    e1, e2, e3 = Epoch(1, 0, "a"), Epoch(2, 100, "a2"), Epoch(3, 250, "b3")
    other2 = Epoch(2, 100, "b2")
    # Same epochs: the shorter log's end (a slave behind or ahead).
    assert consistent_end([e1, e2], 300, [e1, e2], 200) == 200
    assert consistent_end([e1, e2], 300, [e1, e2], 400) == 300
    # The master went on in epoch 3 from 250: the slave's epoch 2 past it is not.
    assert consistent_end([e1, e2, e3], 500, [e1, e2], 400) == 250
    assert consistent_end([e1, e2, e3], 500, [e1, e2], 200) == 200
    # Another store's epoch 2 at the same start: only epoch 1 is shared.
    assert consistent_end([e1, other2], 500, [e1, e2], 400) == 100
    # Nothing shared, or no epochs: the epochs cannot tell.
    assert consistent_end([other2], 500, [e1, e2], 400) is None
    assert consistent_end([e1], 500, [], 400) is None
    assert parse_epochs([{"epoch": 2, "start": 5, "id": "x"}, e1.as_dict()]) is None
    assert parse_epochs([e1.as_dict(), e2.as_dict()]) == [e1, e2]


def _failover(tmp: Path, b_appends: int) -> tuple[Broker, Broker, int, int]:
    """A serves, B follows; B stops, A appends a tail B never gets and stops;
    B is promoted and appends ``b_appends`` messages. Return A (reopened,
    not following), B (promoted, writable), the end B had replicated and A's end."""
    a = Broker.open(tmp / "a", **SETTINGS)
    b = Broker.open(tmp / "b", **SETTINGS)
    for name, n in TOPICS:
        a.create_topic(name, n)
    srv = start_ha_server(a.store, "127.0.0.1:0", SECRET)
    f = SlaveFollower(b.store, srv.address, SECRET).start()
    shared = _send(a, 400, "both")
    wait_for(lambda: b.store.max_physical_offset() == shared, 20, "catch-up")
    wait_for(lambda: read_epochs(b.store.root), 10, "the epochs on the slave")
    f.stop()
    a_end = _send(a, 300, "lost")
    srv.stop()
    a.close()
    rec = f.promote()
    assert rec["promoted_at_offset"] == shared
    eps = read_epochs(b.store.root)
    assert [(e.epoch, e.start) for e in eps] == [(1, 0), (2, shared)]
    if b_appends:
        _send(b, b_appends, "new")
    return Broker.open(tmp / "a", **SETTINGS), b, shared, a_end


@pytest.mark.parametrize("b_appends", [500, 100, 0])
def test_the_old_master_cuts_its_lost_tail_and_follows_the_promoted_slave(
    tmp_path: Path, b_appends: int
) -> None:
    """B appends more than A lost (A's end is below B's), fewer (A's end is
    past B's, but its records there are not B's) or none (A is merely ahead)."""
    a, b, shared, a_end = _failover(tmp_path, b_appends)
    try:
        assert read_epochs(a.store.root)[-1].epoch == 1  # A never saw epoch 2
        srv = start_ha_server(b.store, "127.0.0.1:0", SECRET)  # epoch 3
        f = SlaveFollower(a.store, srv.address, SECRET).start()
        try:
            wait_for(lambda: f.status()["truncations"] == 1, 20, "the cut")
            assert f.status()["truncated_bytes"] == a_end - shared
            end = _send(b, 200, "after")
            wait_for(lambda: a.store.max_physical_offset() == end, 20, "catch-up")
            st = f.status()
            assert st["last_error"] is None and st["truncations"] == 1
        finally:
            f.stop()
            srv.stop()
        # What A cut is kept, and said: its 300 lost messages by key.
        (cut,) = cut_tails(a.store.root)
        assert (cut["from"], cut["to"]) == (shared, a_end)
        assert cut["messages"] == cut["client_messages"] == 300
        listed = json.loads(Path(cut["file"]).read_bytes())["listed"]
        assert sorted(m["keys"] for m in listed) == sorted(
            f"lost{i}" for i in range(300)
        )
        raw = Path(cut["file"]).with_suffix(".log").read_bytes()
        # The records (the log range less a segment's end filler).
        assert a_end - shared - 1024 < len(raw) <= a_end - shared
        assert raw.count(b"lost-1-") >= 1
        # A holds B's log, queues and messages exactly, and B's epochs.
        assert_same_store(b, a)
        assert _ids(a) == _ids(b)
        assert read_epochs(a.store.root) == read_epochs(b.store.root)
        assert [e.epoch for e in read_epochs(a.store.root)] == [1, 2, 3]
        # Consumers of A see B's messages and nothing of A's lost tail.
        got = _bodies(a)
        assert got == _bodies(b)
        assert not [x for x in got if x.startswith(b"lost-")]
        assert sum(x.startswith(b"new-") for x in got) == b_appends
        assert a.query_by_key("E-B", "lost1", 0, 2**62) == []
        assert [m.keys for m in a.query_by_key("E-B", "both1", 0, 2**62)] == ["both1"]
        if b_appends:
            hits = a.query_by_key("E-B", "new1", 0, 2**62)
            assert [m.keys for m in hits] == ["new1"]
    finally:
        a.close()
        b.close()


@pytest.mark.parametrize("missing", ["slave", "master"])
@pytest.mark.parametrize("b_appends", [500, 0])
def test_without_epochs_on_one_side_it_behaves_as_before(
    tmp_path: Path, missing: str, b_appends: int
) -> None:
    """A store from before epochs (no epoch file) on either side: a slave
    merely ahead is cut back, one whose log diverged is refused."""
    a, b, shared, a_end = _failover(tmp_path, b_appends)
    try:
        if missing == "slave":
            (a.store.root / "config" / EPOCH_FILE).unlink()
        srv = start_ha_server(b.store, "127.0.0.1:0", SECRET)
        if missing == "master":
            (b.store.root / "config" / EPOCH_FILE).unlink()
        f = SlaveFollower(a.store, srv.address, SECRET).start()
        try:
            if b_appends:
                wait_for(lambda: f.status()["last_error"], 10, "a refusal")
                assert "diverged" in f.status()["last_error"]
                assert f.status()["truncations"] == 0
                assert a.store.max_physical_offset() == a_end
                assert any(x.startswith(b"lost-") for x in _bodies(a))
            else:
                wait_for(lambda: f.status()["truncations"] == 1, 20, "the cut")
                end = _send(b, 100, "after")
                wait_for(lambda: a.store.max_physical_offset() == end, 20, "catch-up")
                assert f.status()["truncated_bytes"] == a_end - shared
        finally:
            f.stop()
            srv.stop()
        if not b_appends:
            assert_same_store(b, a)
            assert not [x for x in _bodies(a) if x.startswith(b"lost-")]
            # A slave keeps only what its master tells: none from an old master.
            want = [] if missing == "master" else read_epochs(b.store.root)
            assert read_epochs(a.store.root) == want
    finally:
        a.close()
        b.close()


def _stop(p: subprocess.Popen[bytes] | subprocess.Popen[str]) -> None:
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(timeout=20)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


@pytest.mark.slow
def test_failover_with_processes_and_the_promote_command(tmp_path: Path) -> None:
    """The same story with a master process, ``replicate`` processes and
    ``python -m broker_core promote``: A restarts once as a master (a new epoch
    of its own) before it dies; B is promoted from the command line."""
    adir, bdir = tmp_path / "a", tmp_path / "b"
    secret = secret_file(tmp_path)
    addr_a, addr_b = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    procs: list[subprocess.Popen[bytes] | subprocess.Popen[str]] = []
    try:
        rep_b = start_replicate(bdir, addr_a, secret)
        procs.append(rep_b)
        ma = start_master(adir, addr_a, secret, tmp_path / "out-a1", count=2000)
        procs.append(ma)
        assert ma.stdout is not None
        shared = int(ma.stdout.readline().split()[1])
        wait_for(
            lambda: slave_status(bdir).get("replicated_offset") == shared,
            30,
            "B's catch-up",
        )
        _stop(rep_b)
        _stop(ma)
        # A restarts as a master (epoch 2 of its own) and appends what B never gets.
        ma = start_master(
            adir, addr_a, secret, tmp_path / "out-a2", count=1000, first=2000
        )
        procs.append(ma)
        assert ma.stdout is not None
        a_end = int(ma.stdout.readline().split()[1])
        assert a_end > shared
        ma.send_signal(signal.SIGKILL)
        ma.wait()
        done = subprocess.run(
            [sys.executable, "-m", "broker_core", "promote", str(bdir)],
            cwd=ROOT, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert read_role(bdir)["role"] == "ASYNC_MASTER"
        eps_b = read_epochs(bdir)
        assert [(e.epoch, e.start) for e in eps_b] == [(1, 0), (2, shared)]
        assert [(e.epoch, e.start) for e in read_epochs(adir)] == [(1, 0), (2, shared)]
        assert read_epochs(adir)[1] != eps_b[1]  # same number and start, not the same
        # B serves (epoch 3) and appends; A follows it.
        mb = start_master(
            bdir, addr_b, secret, tmp_path / "out-b", count=1500, first=10_000
        )
        procs.append(mb)
        assert mb.stdout is not None
        b_end = int(mb.stdout.readline().split()[1])
        rep_a = start_replicate(adir, addr_b, secret)
        procs.append(rep_a)
        wait_for(
            lambda: slave_status(adir).get("replicated_offset") == b_end,
            30,
            "A's catch-up",
        )
        st = slave_status(adir)
        assert st["truncations"] == 1 and st["truncated_bytes"] == a_end - shared
        _stop(rep_a)
        assert rep_a.stdout is not None
        err = rep_a.stdout.read().decode()
        assert f"cut {a_end - shared} bytes of log" in err
        _stop(mb)
        assert read_commit_pos(adir) == b_end
        with Broker.open(bdir, **SETTINGS) as b, Broker.open(adir, **SETTINGS) as a:
            assert_same_store(b, a)
            assert _ids(a) == _ids(b)
            assert read_epochs(adir) == read_epochs(bdir)
            bodies = [m.body for m in a.store.iter_messages()]
            assert not [x for x in bodies if x.startswith(b"m%08d" % 2500)]
            assert any(x.startswith(b"m%08d." % 10_000) for x in bodies)
            assert not any(
                x.startswith(b"m%08d." % i) for x in bodies for i in (2000, 2999)
            )
        assert json.loads((adir / "config" / "role.json").read_text())["role"] == (
            "SLAVE"
        )
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
