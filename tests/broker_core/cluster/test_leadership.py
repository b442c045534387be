"""The controller's rules on a real etcd (one member; the 3-member faults are
in ``test_controller.py``), and the store's lease fence across processes."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker_core import Broker
from broker_core.cluster.controller import Etcd, Leadership
from broker_core.errors import LeaseExpiredError
from broker_core.message import Message
from tests.conftest import ROOT
from tests.etcd import EtcdCluster, etcd_unavailable


@pytest.fixture
def etcd(tmp_path: Path) -> Iterator[Etcd]:
    why = etcd_unavailable()
    if why:
        pytest.skip(why)
    cluster = EtcdCluster(tmp_path, 1)
    try:
        yield Etcd.from_url(cluster.urls)
    finally:
        cluster.close()


def lead(etcd: Etcd, who: str, ttl: int = 2) -> Leadership:
    return Leadership(etcd, "c", "broker-a", who, ttl)


def gone(leadership: Leadership) -> None:
    """Until etcd has expired the leader's lease (it checks twice a second)."""
    deadline = time.monotonic() + 10
    while leadership.leader() is not None:
        assert time.monotonic() < deadline, "the lease never ran out"
        time.sleep(0.1)


def test_one_leader_and_the_term_decides_who_may_follow(etcd: Etcd) -> None:
    master, slave, other = lead(etcd, "a/0"), lead(etcd, "a/1"), lead(etcd, "a/2")
    assert master.campaign()
    assert master.leading and master.token > 0
    first_term = master.token
    # Leader taken: nobody else, as master or slave.
    assert not slave.campaign(as_slave=True)
    assert "a/0 is the master" in slave.last_error
    # The master's in-sync set names a/1 only.
    assert master.renew(["a/1"])
    assert slave.in_sync() == (["a/1"], master.token)
    gone(master)  # the lease runs out (no renewal)
    assert not master.leading
    # a/2 is not in sync: refused; a/1 is elected in a new term.
    assert not other.campaign(as_slave=True)
    assert "not in the in-sync set" in other.last_error
    assert slave.campaign(as_slave=True)
    assert slave.token > master.token
    # The old master cannot renew, nor lead again: the term moved on.
    assert not master.renew()
    assert not master.campaign()
    assert "a/1 is the master" in master.last_error
    # Even with no leader at all, the old master may not lead the new term.
    new_token = slave.token
    slave.resign()
    assert not master.campaign()
    assert "led broker-a after this store" in master.last_error
    slave.token = new_token
    # The new term's in-sync set can only be written by its leader.
    master.token = first_term
    master.write_in_sync(["a/0"])
    assert slave.in_sync() == (["a/1"], first_term)  # unchanged


def test_a_master_that_lost_its_lease_leads_again_in_its_own_term(etcd: Etcd) -> None:
    master = lead(etcd, "a/0", ttl=1)
    assert master.campaign()
    token = master.token
    gone(master)
    assert not master.renew()  # expired
    assert master.campaign()  # nobody else led: the same term
    assert master.token == token


def test_a_master_restarted_takes_its_own_key_back(etcd: Etcd) -> None:
    first = lead(etcd, "a/0", ttl=30)
    assert first.campaign()
    again = lead(etcd, "a/0", ttl=30)  # the same store, a new process
    assert again.campaign()
    assert again.token == first.token
    assert not first.renew()  # the key is on the new process's lease now
    assert again.renew()


def test_resign_lets_the_slave_in_at_once(etcd: Etcd) -> None:
    master, slave = lead(etcd, "a/0", ttl=30), lead(etcd, "a/1", ttl=30)
    assert master.campaign()
    master.renew(["a/1"])
    master.resign()
    assert slave.campaign(as_slave=True)


def test_the_store_refuses_appends_past_its_lease_in_every_process(
    tmp_path: Path,
) -> None:
    store = tmp_path / "store"
    with Broker.open(store) as broker:
        broker.send(Message("Orders", b"before any lease"))
        state = broker.store.state
        state.lease_until_ns = time.monotonic_ns() + 60 * 10**9
        broker.send(Message("Orders", b"under the lease"))
        end = broker.store.max_physical_offset()
        state.lease_until_ns = time.monotonic_ns() - 1
        with pytest.raises(LeaseExpiredError):
            broker.send(Message("Orders", b"past the lease"))
        # Another process with the store open is refused too.
        other = subprocess.run(
            [sys.executable, "-c",
             "import sys; from broker_core import Broker; "
             "from broker_core.message import Message\n"
             f"with Broker.open({str(store)!r}) as b:\n"
             "    try: b.send(Message('Orders', b'x'))\n"
             "    except Exception as e: sys.exit(type(e).__name__)"],
            cwd=ROOT, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert other.stderr.strip().endswith("LeaseExpiredError"), other.stderr
        assert broker.store.max_physical_offset() == end
        state.lease_until_ns = 0  # no controller: no check
        broker.send(Message("Orders", b"no controller"))
