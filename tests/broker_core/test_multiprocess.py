"""Several OS processes appending to one store at once."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from broker_core import Broker, Message, PullStatus

WORKER = str(Path(__file__).with_name("_workers.py"))


def _read_all(b: Broker) -> list:
    msgs = []
    for q in range(4):
        off = 0
        while True:
            r = b.pull("reader", "MP", q, off, 64)
            if r.status is not PullStatus.FOUND:
                break
            msgs += r.messages
            off = r.next_offset
    return msgs


@pytest.mark.slow
def test_four_processes_append_concurrently_and_a_reader_sees_each_once(
    store_dir: Path, small: dict
) -> None:
    per = 1500
    reader = Broker.open(
        store_dir, **small
    )  # open before the writers: sees growth live
    try:
        reader.create_topic("MP", 4)
        procs = [
            subprocess.Popen(
                [
                    sys.executable,
                    WORKER,
                    "produce",
                    str(store_dir),
                    f"p{i}",
                    str(per),
                    "async",
                ]
            )
            for i in range(4)
        ]
        deadline = time.monotonic() + 120
        seen_live = 0
        while any(p.poll() is None for p in procs) and time.monotonic() < deadline:
            seen_live = max(seen_live, len(_read_all(reader)))
            time.sleep(0.05)
        assert [p.wait(timeout=60) for p in procs] == [0, 0, 0, 0]
        msgs = _read_all(reader)
        assert seen_live > 0  # the reader saw messages while the writers ran
    finally:
        reader.close()
    bodies = [m.body.split(b".")[0].decode() for m in msgs]
    assert len(bodies) == 4 * per and len(set(bodies)) == 4 * per
    msgs.sort(key=lambda m: m.commit_log_offset)
    for i in range(4):
        seq = [
            int(m.body.split(b".")[0].split(b":")[1])
            for m in msgs
            if m.body.startswith(f"p{i}:".encode())
        ]
        assert seq == list(range(per))
    # Every queue is dense and every record is intact after a fresh open.
    with Broker.open(store_dir, **small) as b:
        assert b.store.recovery_info is not None and not b.store.recovery_info.truncated
        assert sum(b.store.max_offset("MP", q) for q in range(4)) == 4 * per
        assert len(list(b.store.iter_messages(0, verify_crc=True))) >= 4 * per


def test_topic_deleted_and_recreated_by_another_process(
    store_dir: Path, small: dict
) -> None:
    with Broker.open(store_dir, **small) as a, Broker.open(store_dir, **small) as b:
        for i in range(5):
            a.send(Message("Churn", f"old{i}".encode(), queue_id=0))
        assert len(b.pull("g", "Churn", 0, 0, 32).messages) == 5
        a.delete_topic("Churn")
        a.create_topic("Churn", 1)
        a.send(Message("Churn", b"new", queue_id=0))
        # b had the old queue mapped: it must see the new queue, not the old one.
        assert [m.body for m in b.pull("g", "Churn", 0, 0, 32).messages] == [b"new"]
        r = b.send(Message("Churn", b"from-b", queue_id=0))
        assert r.queue_offset == 1
        assert [m.body for m in a.pull("g", "Churn", 0, 0, 32).messages] == [
            b"new",
            b"from-b",
        ]


def test_a_forked_child_cannot_use_or_break_its_parents_store(
    store_dir: Path, small: dict
) -> None:
    """``flock`` locks belong to the open file, which a fork shares: a child
    using the inherited store would not be excluded from the parent's appends,
    and closing it would drop the parent's presence (the next opener would
    then run crash recovery under the parent's feet)."""
    import os

    from broker_core.errors import StoreError

    with Broker.open(store_dir, **small) as parent:
        parent.send(Message("Fork", b"before"))
        pid = os.fork()
        if pid == 0:  # the child: refuse, then drop the copy quietly
            code = 0
            try:
                parent.send(Message("Fork", b"child"))
                code = 2
            except StoreError as exc:
                code = 0 if "forked" in str(exc) else 3
            except BaseException:
                code = 4
            try:
                parent.close()
            except BaseException:
                code = code or 5
            os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        # The parent's store is intact and still the only opener's: another
        # process opening it now shares it instead of recovering it.
        parent.send(Message("Fork", b"after"))
        out = subprocess.run(
            [
                sys.executable,
                "-c",
                "import sys; from broker_core import Broker; "
                f"b = Broker.open(sys.argv[1], segment_size={small['segment_size']}); "
                "print(b.store.recovery_info is None); b.close()",
                str(store_dir),
            ],
            capture_output=True,
            text=True,
            check=True,
            cwd=Path(__file__).resolve().parents[2],
        )
        assert out.stdout.strip() == "True", out
        bodies = [
            m.body for q in range(4) for m in parent.pull("g", "Fork", q, 0).messages
        ]
        assert sorted(bodies) == [b"after", b"before"]
