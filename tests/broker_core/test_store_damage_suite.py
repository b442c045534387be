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


def _damage(path: Path, rng: random.Random) -> str:
    data = bytearray(path.read_bytes())
    how = rng.choice(["flip", "zero4k", "truncate", "delete"]) if data else "delete"
    if how == "flip":
        i = rng.randrange(len(data))
        data[i] ^= 1 << rng.randrange(8)
        path.write_bytes(data)
    elif how == "zero4k":
        i = rng.randrange(len(data))
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
            how = _damage(dst / victim.relative_to(src), rng)
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
    assert not failures, failures
