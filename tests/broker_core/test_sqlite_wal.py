"""Processes opening a new store's SQLite files at once (two endpoint workers
starting on a new store): every one gets a WAL connection."""

from __future__ import annotations

import multiprocessing
import sqlite3
from pathlib import Path

from broker_core.sqlite_wal import connect_wal

ROUNDS = 100
PROCS = 4


def _open_all(base: str, barrier, out, plain: bool) -> None:  # type: ignore[no-untyped-def]
    errors = []
    for i in range(ROUNDS):
        barrier.wait()
        path = Path(base) / f"db{i}.sqlite"
        try:
            if plain:
                db = sqlite3.connect(path, timeout=30, isolation_level=None)
                mode = db.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            else:
                db = connect_wal(path, 30)
                mode = db.execute("PRAGMA journal_mode").fetchone()[0]
            db.execute("CREATE TABLE IF NOT EXISTS t (x)")
            db.execute("INSERT INTO t VALUES (1)")
            db.close()
            if mode != "wal":
                errors.append(f"{i}: {mode}")
        except sqlite3.Error as e:
            errors.append(f"{i}: {e}")
    out.put(errors)


def _race(base: Path, plain: bool) -> list[str]:
    ctx = multiprocessing.get_context("fork")
    barrier = ctx.Barrier(PROCS, timeout=30)
    out = ctx.Queue()
    procs = [
        ctx.Process(target=_open_all, args=(str(base), barrier, out, plain))
        for _ in range(PROCS)
    ]
    for p in procs:
        p.start()
    errors = [e for _ in procs for e in out.get(timeout=120)]
    for p in procs:
        p.join(timeout=30)
        assert p.exitcode == 0
    return errors


def test_processes_racing_on_a_new_database_all_get_wal(tmp_path: Path) -> None:
    assert _race(tmp_path, plain=False) == []
    for i in range(ROUNDS):
        db = sqlite3.connect(tmp_path / f"db{i}.sqlite")
        assert db.execute("SELECT count(*) FROM t").fetchone()[0] == PROCS
        db.close()


def test_the_page_size_of_a_new_database_is_set(tmp_path: Path) -> None:
    db = connect_wal(tmp_path / "p.sqlite", 5, page_size=1024)
    db.execute("CREATE TABLE t (x)")
    assert db.execute("PRAGMA page_size").fetchone()[0] == 1024
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    db.close()
