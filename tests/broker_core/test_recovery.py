"""Crash recovery: torn and corrupted tails, and writers killed with SIGKILL."""

from __future__ import annotations

import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from broker_core import Broker, Message, PullStatus

WORKER = str(Path(__file__).with_name("_workers.py"))


def _bodies(b: Broker, topic: str = "MP") -> list[bytes]:
    out = []
    for q in range(b.store.get_topic(topic).queue_nums):
        off = 0
        while True:
            r = b.pull("check", topic, q, off, 256)
            if r.status is not PullStatus.FOUND:
                break
            out += [m.body for m in r.messages]
            off = r.next_offset
    return out


def _crashed_store(tmp_path: Path, count: int) -> Path:
    """A store written by a process that exited without closing (abort marker left)."""
    store = tmp_path / "crashed"
    subprocess.run(
        [
            sys.executable,
            WORKER,
            "produce",
            str(store),
            "p",
            str(count),
            "async",
            "-",
            "--no-close",
        ],
        check=True,
        timeout=120,
    )
    assert (store / "abort").exists()
    return store


@pytest.mark.crash
def test_recovery_keeps_every_intact_record_and_cuts_only_a_torn_tail(
    tmp_path: Path, small: dict
) -> None:
    store = _crashed_store(tmp_path, 400)
    with Broker.open(store, **small) as b:
        records = [
            (m.commit_log_offset, m.store_size, m.body)
            for m in b.store.iter_messages(0)
        ]
        assert len(records) == 400
    # Damage in the last segment (the tail recovery re-verifies), both after a
    # crash (abort marker present) and after a clean close.
    seg_size = small["segment_size"]
    rng = random.Random(7)
    last_base = records[-1][0] - records[-1][0] % seg_size
    tail = [r for r in records if r[0] >= last_base]
    for trial in range(16):
        copy = tmp_path / f"trial{trial}"
        shutil.copytree(store, copy)
        crash = trial % 4 < 2
        if crash:
            (copy / "abort").write_text("1")
        lo, hi = tail[0][0], records[-1][0] + records[-1][1]
        p = rng.randrange(lo, hi)
        seg_file = copy / "commitlog" / f"{p - p % seg_size:020d}"
        torn = bool(trial % 2)
        with open(seg_file, "r+b") as fh:
            if torn:
                fh.truncate(p % seg_size)  # torn: the file ends at p
            else:
                fh.seek(p % seg_size)
                byte = fh.read(1)
                fh.seek(p % seg_size)
                fh.write(bytes([byte[0] ^ 0x5A]))
        hit = [r for r in records if r[0] <= p < r[0] + r[1]]
        if torn:
            survivors = [r for r in records if r[0] + r[1] <= p]
        else:
            survivors = [r for r in records if r not in hit]
        with Broker.open(copy, **small) as b:
            info = b.store.recovery_info
            assert info is not None and info.abnormal is crash
            got = [
                (m.commit_log_offset, m.store_size, m.body)
                for m in b.store.iter_messages(0)
            ]
            assert got == survivors, (trial, p)
            assert sorted(_bodies(b)) == sorted(r[2] for r in survivors)
            if not torn:
                # Exactly the damaged record is in quarantine, with its bytes.
                q = [(r.offset, r.length) for r in b.store.quarantine.ranges]
                assert q == [(hit[0][0], hit[0][1])]
                assert info.log_end == records[-1][0] + records[-1][1]
            # The repaired store takes new messages after the end.
            r = b.send(Message("MP", b"after-crash", queue_id=0))
            assert b.store.read_message(r.commit_log_offset).body == b"after-crash"
        with Broker.open(copy, **small) as b:
            assert b"after-crash" in _bodies(b)


def _acked(path: Path) -> set[int]:
    if not path.exists():
        return set()
    lines = path.read_text().split("\n")
    return {int(x) for x in lines[:-1] if x}  # the last line may be torn


@pytest.mark.crash
@pytest.mark.slow
@pytest.mark.parametrize("flush", ["sync", "async"])
def test_writers_killed_with_sigkill_lose_no_acknowledged_message(
    tmp_path: Path, small: dict, flush: str
) -> None:
    store = tmp_path / "store"
    rng = random.Random(flush)
    acks = []
    for round_ in range(3):
        procs = []
        for w in range(2):
            ack = tmp_path / f"ack-{round_}-{w}"
            acks.append((f"r{round_}w{w}", ack))
            procs.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        WORKER,
                        "produce",
                        str(store),
                        f"r{round_}w{w}",
                        "-1",
                        flush,
                        str(ack),
                    ]
                )
            )
        # Let both writers get going (start-up time varies on a loaded machine),
        # then kill one at a random moment: the other keeps appending over its
        # leftovers.
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not all(
            len(_acked(a)) >= 5 for _, a in acks[-2:]
        ):
            time.sleep(0.02)
        time.sleep(rng.uniform(0.05, 0.6))
        procs[0].send_signal(signal.SIGKILL)
        time.sleep(rng.uniform(0.05, 0.4))
        procs[1].send_signal(signal.SIGKILL)
        for p in procs:
            p.wait(timeout=30)
    with Broker.open(store, **small) as b:
        assert b.store.recovery_info is not None and b.store.recovery_info.abnormal
        bodies = _bodies(b)
        stored: dict[str, list[int]] = {}
        for body in bodies:
            prod, seq = body.split(b".")[0].decode().split(":")
            stored.setdefault(prod, []).append(int(seq))
        total_acked = 0
        for prod, ack in acks:
            acked = _acked(ack)
            total_acked += len(acked)
            have = stored.get(prod, [])
            assert len(have) == len(set(have))  # nothing twice
            assert acked <= set(have), prod  # nothing acknowledged is lost
        assert total_acked > 0
        assert len(list(b.store.iter_messages(0, verify_crc=True))) == len(bodies)
        # The key index is derived data too: acknowledged keys are found.
        for prod, ack in acks[:3]:
            for seq in sorted(_acked(ack))[-3:]:
                found = b.query_by_key("MP", f"{prod}-{seq}")
                assert [m.body.split(b".")[0] for m in found] == [
                    f"{prod}:{seq}".encode()
                ]
