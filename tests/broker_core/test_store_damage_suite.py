"""Randomised (seeded) damage to every derived file kind of a store: consume
queues, configuration (topics, store geometry, consumer offsets), the state
file and the checkpoint. Each trial damages one file of a copy of the same
store (a flipped bit, a 4 KiB run of zeros, a truncation or a deletion), then
opens it and runs ``verify --repair`` (``repair_store``). Afterwards: every
message of the log is readable once by queue, a tag subscription gets exactly
its messages, nothing that was never sent appears, the committed offsets are
the ones committed (or the store says it fell back), and ``verify`` is OK.
The counts per file kind are printed.

Found by it, fixed with it: a zeroed run of consume-queue units left 177
messages unreachable even after ``verify --repair`` (the repair compared one
unit in 64 and never the queue's end with the log's); a flipped unit lost its
message for good; a flipped tag hash was never reported."""

from __future__ import annotations

import random
import shutil
from collections import Counter
from pathlib import Path

import pytest

from broker_core import Broker, Message
from broker_core.errors import ConfigFileError
from broker_core.verify import repair_store, verify_store

pytestmark = pytest.mark.slow

SETTINGS = {
    "segment_size": 256 * 1024,
    "cq_units_per_file": 512,
    "index_slots": 4096,
    "index_entries": 16384,
}
QUEUES = 4
MESSAGES = 1600
SEED = 20261127
TRIALS_PER_KIND = 12
#: Files that hold state of their own, not derived from the log: damaged with
#: no usable backup, the store refuses to open and says so.
PRIMARY = {"consumerOffset.json"}


def _read_all(root: Path, tag: str = "*") -> tuple[Counter, dict[int, int]]:
    got: Counter = Counter()
    with Broker.open(root) as b:
        for q in range(QUEUES):
            off = 0
            while True:
                r = b.pull("probe", "T", q, off, 256, expression=tag)
                for m in r.messages:
                    got[m.body] += 1
                if r.next_offset <= off:
                    break
                off = r.next_offset
        offsets = {q: b.store.committed_offset("G", "T", q) for q in range(QUEUES)}
    return got, offsets


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> tuple[Path, Counter, Counter, dict]:
    src = tmp_path_factory.mktemp("damage") / "src"
    with Broker.open(src, **SETTINGS) as b:
        b.create_topic("T", QUEUES, QUEUES)
        for i in range(MESSAGES):
            tag = "paid" if i % 3 == 0 else "open"
            b.send(Message("T", b"body-%05d" % i, keys=f"k{i}", tags=tag))
        for q in range(QUEUES):
            b.commit_offset("G", "T", q, 7 + q)
    every, offsets = _read_all(src)
    paid, _ = _read_all(src, "paid")
    assert len(every) == MESSAGES and all(n == 1 for n in every.values())
    assert len(paid) == MESSAGES // 3 + 1
    return src, every, paid, offsets


def _files(src: Path) -> dict[str, list[Path]]:
    return {
        "consume queue": sorted(
            p for p in (src / "consumequeue").rglob("*") if p.is_file()
        ),
        "config": sorted((src / "config").glob("*.json")),
        "state": [src / "state"],
        "checkpoint": [src / "checkpoint"],
    }


def _damage(path: Path, rng: random.Random, used: int | None = None) -> str:
    """Damage ``path`` one way; ``used``: aim at its first ``used`` bytes (a
    file mostly empty, whose damage elsewhere would touch nothing)."""
    data = bytearray(path.read_bytes())
    how = rng.choice(["flip", "zero4k", "truncate", "delete"]) if data else "delete"
    span = min(len(data), used) if used else len(data)
    if how == "flip":
        i = rng.randrange(span)
        data[i] ^= 1 << rng.randrange(8)
        path.write_bytes(data)
    elif how == "zero4k":
        i = rng.randrange(span)
        data[i : i + 4096] = bytes(len(data[i : i + 4096]))
        path.write_bytes(data)
    elif how == "truncate":
        path.write_bytes(data[: rng.randrange(len(data))])
    else:
        path.unlink()
    return how


def test_damage_to_any_derived_file_is_repaired(source, tmp_path) -> None:
    src, every, paid, offsets = source
    rng = random.Random(SEED)
    counts: dict[str, Counter] = {}
    failures = []
    for kind, files in _files(src).items():
        for trial in range(TRIALS_PER_KIND):
            dst = tmp_path / f"{kind.replace(' ', '_')}-{trial}"
            shutil.copytree(src, dst)
            victim = rng.choice(files)
            # The checkpoint's and the state file's fields are their first
            # 80 bytes: damage past them touches nothing.
            used = 80 if kind in ("state", "checkpoint") else None
            how = _damage(dst / victim.relative_to(src), rng, used)
            case = f"{kind}: {how} {victim.relative_to(src)}"
            flagged = not verify_store(dst).ok
            try:
                repair_store(dst)
            except ConfigFileError as exc:
                # Consumer offsets are not derived from the log: with the file
                # and its backup unreadable the store refuses to open, naming
                # the file and what to do, rather than restart every group.
                assert victim.name in PRIMARY and victim.name in str(exc), exc
                assert "Restore it from a backup, or delete it" in str(exc)
                counts.setdefault(kind, Counter())["refused, naming the file"] += 1
                counts[kind]["trials"] += 1
                continue
            got, now = _read_all(dst)
            got_paid, _ = _read_all(dst, "paid")
            after = verify_store(dst)
            problems = []
            if got != every:
                problems.append(
                    f"{len(set(every) - set(got))} unreachable, "
                    f"{len(set(got) - set(every))} phantom, "
                    f"{sum(n - 1 for n in got.values() if n > 1)} twice"
                )
            if got_paid != paid:
                problems.append(f"tag subscription got {len(got_paid)} of {len(paid)}")
            if now != offsets and victim.name not in PRIMARY:
                problems.append(f"offsets {now} instead of {offsets}")
            if not after.ok:
                problems.append(f"verify after repair: {after.problems[:2]}")
            c = counts.setdefault(kind, Counter())
            c["trials"] += 1
            c["flagged by verify"] += flagged
            c["repaired"] += not problems
            if problems:
                failures.append(f"{case}: {'; '.join(problems)}")
    for kind, c in counts.items():
        print(f"{kind}: {dict(c)}")
    for f in failures:
        print(f"FAILED {f}")
    assert not failures, failures


# -- the index, the transaction files and the commit log ----------------------

TX_HALVES = 60


def _observe(root: Path, tids: list[str], keys: list[str]) -> dict:
    """What a user sees of the store: every message by queue, a key lookup of
    each sampled key (the index), and each transaction's state."""
    from broker_core.errors import UnknownTransactionError
    from broker_core.transaction import TransactionService

    got, _ = _read_all(root)
    with Broker.open(root) as b:
        found = {k: [m.body for m in b.query_by_key("T", k)] for k in keys}
        with TransactionService(b) as tx:
            states = {}
            for t in tids:
                try:
                    states[t] = tx.state(t).value
                except UnknownTransactionError:  # its half's record is lost
                    states[t] = "UNKNOWN"
    return {"messages": got, "keys": found, "states": states}


@pytest.fixture(scope="module")
def tx_source(tmp_path_factory) -> tuple[Path, list, list, dict, dict]:
    from broker_core.transaction import TransactionService

    src = tmp_path_factory.mktemp("damage-tx") / "src"
    spans: dict[bytes, tuple[int, int]] = {}  # body -> (log offset, size)
    tids = []
    with Broker.open(src, **SETTINGS) as b:
        b.create_topic("T", QUEUES, QUEUES)
        with TransactionService(b, transaction_timeout_ms=3_600_000) as tx:
            for i in range(MESSAGES):
                tag = "paid" if i % 3 == 0 else "open"
                r = b.send(Message("T", b"body-%05d" % i, keys=f"k{i}", tags=tag))
                if i % 40 == 0:
                    h = tx.send_half("PG", Message("T", b"half-%05d" % i, keys=f"h{i}"))
                    tids.append(h.transaction_id)
                    n = len(tids)
                    if n % 3 == 1:
                        tx.end_transaction(h.transaction_id, "PG", "COMMIT")
                    elif n % 3 == 2:
                        tx.end_transaction(h.transaction_id, "PG", "ROLLBACK")
            b.store.build_index()
        for q in range(QUEUES):
            off = 0
            while True:
                r = b.pull("probe", "T", q, off, 256)
                for m in r.messages:
                    spans[m.body] = (m.commit_log_offset, m.store_size)
                if r.next_offset <= off:
                    break
                off = r.next_offset
    keys = [f"k{i}" for i in range(0, MESSAGES, 97)]
    truth = _observe(src, tids, keys)
    committed = sum(1 for n in range(1, len(tids) + 1) if n % 3 == 1)
    assert len(truth["messages"]) == MESSAGES + committed
    assert set(truth["states"].values()) == {"PENDING", "COMMITTED", "ROLLED_BACK"}
    return src, tids, keys, truth, spans


def _tx_files(src: Path) -> dict[str, list[Path]]:
    return {
        "index": sorted(p for p in (src / "index").iterdir() if p.is_file()),
        "transaction state": sorted(
            p for p in (src / "transaction" / "state").iterdir() if p.is_file()
        ),
        # Its entries proper (24 bytes a half): damage elsewhere in the 6 MiB
        # file touches nothing.
        "transaction state entries": [
            src / "transaction" / "state" / "00000000000000000000"
        ],
        "transaction index (SQLite)": [src / "transaction" / "index.db"],
        "commit log": sorted((src / "commitlog").iterdir()),
    }


def test_damage_to_the_index_the_transaction_files_and_the_log(
    tx_source, tmp_path
) -> None:
    """The index, the transaction state table and its SQLite index are derived
    from the log: any damage is repaired with nothing lost. Damage to the log
    itself loses at most the records it touched, never another message, never
    a phantom, and ``verify`` reports it."""
    from broker_core.shared import read_commit_pos

    src, tids, keys, truth, spans = tx_source
    log_end = read_commit_pos(src)  # bytes past it belong to no record
    rng = random.Random(SEED + 1)
    counts: dict[str, Counter] = {}
    failures = []
    for kind, files in _tx_files(src).items():
        for trial in range(TRIALS_PER_KIND):
            dst = tmp_path / f"{kind.replace(' ', '_')}-{trial}"
            shutil.copytree(src, dst)
            victim = rng.choice(files)
            target = dst / victim.relative_to(src)
            size = target.stat().st_size
            before = target.read_bytes()
            used = 24 * len(tids) if kind == "transaction state entries" else None
            how = _damage(target, rng, used)
            after_bytes = target.read_bytes() if target.exists() else b""
            case = f"{kind}: {how} {victim.relative_to(src)}"
            flagged = not verify_store(dst).ok
            c = counts.setdefault(kind, Counter())
            c["trials"] += 1
            c["flagged by verify"] += flagged
            try:
                repair_store(dst)
                seen = _observe(dst, tids, keys)
            except Exception as exc:  # noqa: BLE001 - a trial's finding
                failures.append(f"{case}: {type(exc).__name__}: {exc}")
                continue
            problems = []
            lost_ok: set[bytes] = set()
            if kind == "commit log":
                # The records whose bytes changed may be lost, nothing else.
                base = int(victim.name)
                changed = [
                    i
                    for i in range(size)
                    if i >= len(after_bytes) or before[i] != after_bytes[i]
                ]
                lo, hi = (
                    (base + min(changed), base + max(changed) + 1)
                    if changed
                    else (0, 0)
                )
                lost_ok = {
                    body
                    for body, (off, n) in spans.items()
                    if off < hi and off + n > lo
                }
                if changed and lo < log_end and not flagged:
                    problems.append("verify did not report the damage")
            got = seen["messages"]
            every = truth["messages"]
            unreachable = set(every) - set(got) - lost_ok
            phantom = set(got) - set(every)
            twice = [b for b, n in got.items() if n > 1]
            if unreachable or phantom or twice:
                problems.append(
                    f"{len(unreachable)} unreachable, {len(phantom)} phantom, "
                    f"{len(twice)} twice"
                )
            for k, bodies in truth["keys"].items():
                if seen["keys"][k] != bodies and not (set(bodies) & lost_ok):
                    problems.append(f"key {k}: {seen['keys'][k]} not {bodies}")
            wrong = {
                t: (truth["states"][t], s)
                for t, s in seen["states"].items()
                if s != truth["states"][t]
            }
            if wrong and kind != "commit log":
                problems.append(f"transaction states {wrong}")
            if kind != "commit log":
                after = verify_store(dst)
                if not after.ok:
                    problems.append(f"verify after repair: {after.problems[:2]}")
            c["no loss"] += not problems
            if problems:
                failures.append(f"{case}: {'; '.join(problems)}")
    for kind, c in counts.items():
        print(f"{kind}: {dict(c)}")
    for f in failures:
        print(f"FAILED {f}")
    assert not failures, failures
