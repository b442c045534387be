"""Damaged SQLite files of the endpoint (``grpc/pop.db``, the pop state;
``grpc/sends.db``, recent client message ids) never take the service down.

Before: one zeroed page in ``pop.db`` failed every receive of every group
with INTERNAL_ERROR, and a damaged ``sends.db`` failed every send. Now a
damaged file is set aside (``<name>.damaged-<ms>``) and started again, at
open or when a read hits the damage while serving: receives start again at
each group's committed offset, so nothing that was not acknowledged is lost
(messages in flight come again), and ``verify`` names the damage and its
cost. Real faults: zeroed pages and an overwritten header in the real files,
a real ``serve`` and the official Python client."""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path

import pytest

from broker_core import Broker, Message, sqlite_wal
from broker_core.endpoint.pop import PopManager
from broker_core.verify import verify_store
from tests.endpoint_server import result, spawn, start_server, stop_server
from tests.support import free_port

pytestmark = [pytest.mark.protocol, pytest.mark.slow]

BODIES = {f"d{i}" for i in range(6)}


def _zero_pages(path: Path) -> None:
    """Up to 4 KiB of zeros after the first page (1 KiB pages): b-tree pages
    of the tables. While serving, the newest pages may still be in the WAL
    only (read from there, the zeros below them are no damage): zeroed again
    until SQLite's own check finds the damage, after the endpoint's next
    checkpoint (every half second)."""
    deadline = time.monotonic() + 15
    while True:
        size = path.stat().st_size
        with open(path, "r+b") as f:
            f.seek(1024)
            f.write(b"\0" * min(4096, max(0, size - 1024)))
        if sqlite_wal.damage(path) is not None:
            return
        assert time.monotonic() < deadline, "the zeros never hit a live page"
        time.sleep(0.5)


def _poke(path: Path) -> None:
    """A write by another connection: every open connection's page cache is
    dropped, so the serving process reads the damaged pages from disk."""
    db = sqlite3.connect(path, isolation_level=None, timeout=30)
    try:
        db.execute("CREATE TABLE IF NOT EXISTS poke (x)")
    finally:
        db.close()


def _asides(path: Path) -> list[Path]:
    return sorted(
        p
        for p in path.parent.glob(path.name + ".damaged-*")
        if p.name.rsplit("-", 1)[1].isdigit()
    )


def test_damaged_pop_state_and_sends_while_serving_and_at_start(tmp_path, monkeypatch):
    store = tmp_path / "store"
    pop_db = store / "grpc" / "pop.db"
    sends_db = store / "grpc" / "sends.db"
    port = free_port()
    proc = start_server(store, port, tmp_path / "a.log")
    try:
        ep = f"127.0.0.1:{port}"
        a = result(spawn("damage_a", ep, "x", tmp_path))
        # Damaged while serving: the next receive reads the damaged pages.
        _zero_pages(pop_db)
        _poke(pop_db)
        monkeypatch.setenv("WANT", json.dumps(sorted(BODIES - set(a["acked"]))))
        b = result(spawn("damage_b", ep, "x", tmp_path))
    finally:
        assert stop_server(proc) == 0
    log = (tmp_path / "a.log").read_text()
    assert "receive failed" not in log and "INTERNAL" not in log, log[-3000:]
    assert "set aside" in log
    assert len(_asides(pop_db)) == 1
    # Nothing unacknowledged lost; the acknowledged ones may come again (the
    # committed offset is the low-water mark), nothing else appears.
    assert BODIES - set(a["acked"]) <= set(b["got"]) <= BODIES
    assert b["after"]

    # Damaged while stopped: both files (``sends.db`` is used with several
    # workers: one whose first page is garbage); verify names each with its
    # cost, then two workers start on them.
    _zero_pages(pop_db)
    sends_db.write_bytes(b"this is no database header!!" * 100)
    report = verify_store(store)
    text = "\n".join(report.problems)
    assert "grpc/pop.db is damaged" in text and "delivered again" in text
    assert "grpc/sends.db is damaged" in text and "stored twice" in text
    port = free_port()
    proc = start_server(store, port, tmp_path / "b.log", workers=2)
    try:
        ep = f"127.0.0.1:{port}"
        monkeypatch.setenv("WANT", json.dumps([]))
        c = result(spawn("damage_b", ep, "x", tmp_path))
    finally:
        assert stop_server(proc) == 0
    assert c["after"]  # a send and its receive, on fresh files
    assert len(_asides(pop_db)) == 2 and len(_asides(sends_db)) == 1
    assert sqlite_wal.damage(pop_db) is None and sqlite_wal.damage(sends_db) is None
    assert not verify_store(store).problems


def test_a_pop_state_replaced_by_another_process_is_reopened(tmp_path):
    """Two processes' pop state on one store: the one that finds the damage
    sets the file aside; the other, still on the old file, notices at its
    next round of background work and reopens, instead of going on popping
    from a file the others no longer use."""
    with Broker.open(tmp_path / "s") as b:
        b.create_topic("T", 2, 2)
        for i in range(20):
            b.send(Message("T", b"m%02d" % i))
        first = PopManager(b)
        got = first.pop("G", "T", 8, 60_000, "*", "TAG")
        assert len(got) == 8
        path = first.path
        first.checkpoint()  # the pages in the file, not only in the WAL
        _zero_pages(path)
        second = PopManager(b)  # opens: finds the damage, sets the file aside
        assert len(_asides(path)) == 1
        assert first.available()  # noticed the new file and reopened it
        again = first.pop("G", "T", 32, 60_000, "*", "TAG")
        # From the committed offsets (none: the queues' starts): all twenty.
        assert len(again) == 20
        assert second.pop("G", "T", 32, 60_000, "*", "TAG") == []
        first.close()
        second.close()
