"""Store integrity: damage anywhere is isolated, reported and never served.

Random bytes are written into the segments of a real multi-segment store (after
a clean close, after a crash with a checkpoint, after a crash without one);
then every record whose bytes are intact must still be readable with its body,
exactly the damaged records must be reported by ``verify`` and quarantined by
``verify --repair``, and no damaged record may be served.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker_core import Broker, Message, PullStatus
from broker_core.errors import BrokerError, ConfigFileError
from broker_core.verify import repair_and_verify, repair_store, verify_store

SETTINGS: dict[str, Any] = {
    "segment_size": 64 * 1024,
    "cq_units_per_file": 256,
    "index_slots": 1024,
    "index_entries": 8192,
    "flush_interval_ms": 50,
}
TOPICS = ("IA", "IB")


def _fill(path: Path, count: int = 900) -> list[tuple[int, int, bytes]]:
    """Write ``count`` messages over two topics; return (offset, size, body)."""
    with Broker.open(path, **SETTINGS) as b:
        for i in range(count):
            body = (f"body-{i}-" * (1 + i % 7)).encode()
            b.send(Message(TOPICS[i % 2], body, queue_id=i % 4, keys=[f"key-{i}"]))
        b.store.build_index()
        return [
            (m.commit_log_offset, m.store_size, m.body) for m in b.store.iter_messages()
        ]


class Template(tuple):
    """(store path, records); a short repr keeps hypothesis reports readable."""

    def __repr__(self) -> str:
        return f"Template({self[0]}, {len(self[1])} records)"


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Template:
    path = tmp_path_factory.mktemp("integrity") / "store"
    records = _fill(path)
    assert len(records) == 900
    assert len(list((path / "commitlog").iterdir())) >= 3
    return Template((path, records))


def _copy(template: Template, tmp_path: Path) -> tuple[Path, list]:
    """A fresh copy of the template store, and its records."""
    store = tmp_path / "store"
    shutil.copytree(template[0], store)
    return store, template[1]


def _pulled(b: Broker) -> list[bytes]:
    out = []
    for topic in TOPICS:
        if b.store.topic_config(topic) is None:
            continue
        for q in range(4):
            off = 0
            while True:
                r = b.pull("check", topic, q, off, 64)
                out += [m.body for m in r.messages]
                if r.status is PullStatus.NO_NEW_MSG or r.next_offset == off:
                    break
                off = r.next_offset
    return out


def _covered(records: list, ranges: list[tuple[int, int]]) -> set[int]:
    """Offsets of the records that overlap any ``[start, end)`` (end -1: no end)."""
    out = set()
    for off, size, _body in records:
        for start, end in ranges:
            if off + size > start and (end < 0 or off < end):
                out.add(off)
    return out


@settings(
    max_examples=40,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    data=st.data(),
    mode=st.sampled_from(["clean", "crash", "crash-no-checkpoint"]),
)
def test_random_damage_is_isolated_reported_and_never_served(
    template: Template, tmp_path_factory: pytest.TempPathFactory, data, mode
) -> None:
    src, records = template
    store = tmp_path_factory.mktemp("trial") / "store"
    shutil.copytree(src, store)
    end = records[-1][0] + records[-1][1]
    seg = SETTINGS["segment_size"]
    writes = data.draw(
        st.lists(
            st.tuples(st.integers(0, end - 1), st.binary(min_size=1, max_size=24)),
            min_size=1,
            max_size=4,
        )
    )
    files = sorted((store / "commitlog").iterdir())
    original = {int(f.name): f.read_bytes() for f in files}
    for pos, junk in writes:
        path = store / "commitlog" / f"{pos - pos % seg:020d}"
        with open(path, "r+b") as fh:
            fh.seek(pos % seg)
            fh.write(junk[: seg - pos % seg])
    changed: set[int] = set()
    for base, before in original.items():
        now = (store / "commitlog" / f"{base:020d}").read_bytes()
        pairs = enumerate(zip(before, now, strict=True))
        changed |= {base + i for i, (a, b) in pairs if a != b}
    damaged = {
        off for off, size, _ in records if any(off <= p < off + size for p in changed)
    }
    intact = [r for r in records if r[0] not in damaged]
    if mode != "clean":
        (store / "abort").write_text("1")
    if mode == "crash-no-checkpoint":
        (store / "checkpoint").unlink()

    with Broker.open(store, **SETTINGS) as b:
        # Every intact record is served with its body; no damaged one is.
        assert sorted(_pulled(b)) == sorted(body for _o, _s, body in intact)
        for off, _size, body in intact[:: max(1, len(intact) // 50)]:
            assert b.store.read_message(off).body == body
        got = [(m.commit_log_offset, m.body) for m in b.store.iter_messages()]
        assert got == [(o, body) for o, _s, body in intact]

    report = verify_store(store)
    reported = [(d["start"], d["end"]) for d in report.damaged] + [
        (q["offset"], q["offset"] + q["length"]) for q in report.quarantined
    ]
    assert _covered(records, reported) == damaged
    assert report.ok is (not reported and not report.problems)

    repair_store(store)
    after = verify_store(store)
    assert after.damaged == []
    quarantined = [(q["offset"], q["offset"] + q["length"]) for q in after.quarantined]
    assert _covered(records, quarantined) == damaged
    assert after.problems == []
    for start, _end in quarantined:
        assert (store / "quarantine" / f"{start:020d}.bin").exists() or start >= end
    with Broker.open(store, **SETTINGS) as b:
        assert sorted(_pulled(b)) == sorted(body for _o, _s, body in intact)
        r = b.send(Message("IA", b"after-repair", queue_id=0))
        assert b.store.read_message(r.commit_log_offset).body == b"after-repair"


def test_one_flipped_byte_in_an_early_segment_loses_nothing_else(
    template: Template, tmp_path: Path
) -> None:
    """The issue's case: a crash with no checkpoint and one flipped body byte in
    segment 1 of several. RocketMQ (and this store before) cut everything after."""
    store, records = _copy(template, tmp_path)
    off, size, body = records[10]
    path = store / "commitlog" / f"{0:020d}"
    with open(path, "r+b") as fh:
        fh.seek(off + size // 2)
        b = fh.read(1)
        fh.seek(off + size // 2)
        fh.write(bytes([b[0] ^ 1]))
    (store / "abort").write_text("1")
    (store / "checkpoint").unlink()
    with Broker.open(store, **SETTINGS) as br:
        info = br.store.recovery_info
        assert info is not None and info.abnormal
        assert [(q.offset, q.length) for q in info.quarantined] == [(off, size)]
        assert len(_pulled(br)) == len(records) - 1
    assert len(list((store / "commitlog").iterdir())) >= 3
    out = subprocess.run(
        [sys.executable, "-m", "broker_core", "inspect", str(store)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 1 and "quarantined" in out.stdout


def test_derived_data_and_config_are_checked_not_trusted(
    template: Template, tmp_path: Path
) -> None:
    store, records = _copy(template, tmp_path)
    # A consume-queue file cut short, the index deleted, garbage topics.json.
    cq = store / "consumequeue" / "IA" / "2" / f"{0:020d}"
    with open(cq, "r+b") as fh:
        fh.truncate(20 * 10)
    shutil.rmtree(store / "index")
    (store / "config" / "topics.json").write_text("{not json")
    before = verify_store(store)
    assert not before.ok
    assert any("IA/2" in p for p in before.problems)
    assert any("index" in p for p in before.problems)
    assert any("topics.json" in p for p in before.problems)
    with Broker.open(store, **SETTINGS) as b:
        info = b.store.recovery_info
        assert info is not None
        assert ("IA", 2) in info.rebuilt_queues and info.index_rebuilt
        assert sorted(_pulled(b)) == sorted(body for _o, _s, body in records)
        b.store.build_index()
        for i in (0, 450, 899):
            hits = b.query_by_key(TOPICS[i % 2], f"key-{i}")
            assert [m.body for m in hits] == [records[i][2]]
    assert verify_store(store).ok


def test_config_without_a_usable_backup_is_a_clear_error(tmp_path: Path) -> None:
    store = tmp_path / "store"
    with Broker.open(store, **SETTINGS) as b:
        b.send(Message("IA", b"x", queue_id=0))
    for name in ("consumerOffset.json", "consumerOffset.json.bak"):
        (store / "config" / name).write_text("")
    with pytest.raises(ConfigFileError, match="consumerOffset.json.*delete it"):
        Broker.open(store, **SETTINGS)
    (store / "config" / "consumerOffset.json").unlink()
    (store / "config" / "consumerOffset.json.bak").unlink()
    with Broker.open(store, **SETTINGS) as b:
        assert len(_pulled(b)) == 1


def test_a_deleted_last_segment_is_reported_loudly(
    template: Template, tmp_path: Path
) -> None:
    store, records = _copy(template, tmp_path)
    last = sorted((store / "commitlog").iterdir())[-1]
    lost = [r for r in records if r[0] >= int(last.name)]
    last.unlink()
    report = verify_store(store)
    assert any("missing" in p for p in report.problems)
    with Broker.open(store, **SETTINGS) as b:
        info = b.store.recovery_info
        assert info is not None and info.missing_bytes > 0
        assert len(_pulled(b)) == len(records) - len(lost)
    # Reported for good: the quarantine list says what is gone.
    assert not verify_store(store).ok


def test_a_deleted_middle_segment_costs_only_its_own_records(
    template: Template, tmp_path: Path
) -> None:
    """A segment file deleted between others: its records are lost, every
    later segment's are kept, by the open, by ``verify --repair`` (which cut
    the log at the gap: 1,147 more messages unreadable after it than before)
    and by the sends after it; ``verify`` names the missing range."""
    store, records = _copy(template, tmp_path)
    segments = sorted((store / "commitlog").iterdir())
    assert len(segments) >= 3
    gone = segments[1]
    start, end = int(gone.name), int(segments[2].name)
    lost = {r[0] for r in records if start <= r[0] < end}
    assert lost and len(lost) < len(records)
    want = sorted(body for off, _size, body in records if off not in lost)
    gone.unlink()
    assert not verify_store(store).ok
    with Broker.open(store, **SETTINGS) as b:
        assert sorted(_pulled(b)) == want
    repaired = repair_store(store)
    assert repaired["log_end"] > int(segments[-1].name), repaired
    assert any(
        q["offset"] == start and q["length"] == end - start and q["action"] == "lost"
        for q in repaired["quarantined"]
    ), repaired["quarantined"]
    with Broker.open(store, **SETTINGS) as b:
        assert sorted(_pulled(b)) == want
        b.send(Message("IA", b"after the repair", queue_id=0))
    with Broker.open(store, **SETTINGS) as b:
        assert sorted(_pulled(b)) == sorted([*want, b"after the repair"])
    report = verify_store(store)
    assert [(q["offset"], q["length"]) for q in report.quarantined] == [
        (start, end - start)
    ], report.quarantined


def test_a_segment_put_back_is_read_again_after_repair(
    template: Template, tmp_path: Path
) -> None:
    """A middle segment moved away, the store opened (its messages' units
    became placeholders), the file put back: ``verify`` says the queues hide
    records the log has, and ``verify --repair`` makes every message readable
    again (the placeholders hid them for good, verify said OK)."""
    store, records = _copy(template, tmp_path)
    seg = sorted((store / "commitlog").iterdir())[1]
    aside = tmp_path / seg.name
    seg.rename(aside)
    with Broker.open(store, **SETTINGS) as b:
        assert len(_pulled(b)) < len(records)
    aside.rename(seg)
    report = verify_store(store)
    assert any("hidden" in p for p in report.problems), report.problems
    repaired = repair_store(store)
    assert repaired["reachable_after"] == len(records) > repaired["reachable_before"]
    with Broker.open(store, **SETTINGS) as b:
        assert sorted(_pulled(b)) == sorted(r[2] for r in records)


def test_a_repair_that_would_lose_messages_is_undone(
    template: Template, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``verify --repair`` proves its work: every queue must make at least as
    many intact messages reachable after it as before, or the files it
    rewrote are put back. The repair's own mistake is injected here (no
    damage of a file makes it; the deleted middle segment above did): it
    zeroes a queue's units after repairing."""
    from broker_core import verify
    from broker_core.errors import RepairRefusedError

    store, records = _copy(template, tmp_path)
    real = verify._repair

    def careless(root: Path) -> dict[str, Any]:
        out = real(root)
        qfile = sorted((root / "consumequeue" / "IA" / "0").iterdir())[0]
        qfile.write_bytes(bytes(qfile.stat().st_size))
        return out

    monkeypatch.setattr(verify, "_repair", careless)
    with pytest.raises(RepairRefusedError, match=r"unreachable .*IA/0: \d+"):
        repair_store(store)
    assert not (store / "repair-backup").exists()
    with Broker.open(store, **SETTINGS) as b:
        assert sorted(_pulled(b)) == sorted(r[2] for r in records)
    monkeypatch.setattr(verify, "_repair", real)
    done = repair_store(store)
    assert done["reachable_before"] == done["reachable_after"] == len(records)
    assert not (store / "repair-backup").exists()


def test_offsets_are_written_on_a_timer_and_at_close(tmp_path: Path) -> None:
    store = tmp_path / "store"
    with Broker.open(store, **SETTINGS, offset_persist_interval_ms=100) as b:
        for _ in range(5):
            b.send(Message("IA", b"x", queue_id=0))
        b.commit_offset("g", "IA", 0, 3)
        assert b.committed_offset("g", "IA", 0) == 3
        other = subprocess.run(
            [
                sys.executable,
                "-c",
                "import sys, time; from broker_core import Broker\n"
                "b = Broker.open(sys.argv[1], segment_size=65536, "
                "cq_units_per_file=256, index_slots=1024, index_entries=8192)\n"
                "deadline = time.time() + 10\n"
                "while (b.committed_offset('g', 'IA', 0) != 3\n"
                "       and time.time() < deadline):\n"
                "    time.sleep(0.02)\n"
                "print(b.committed_offset('g', 'IA', 0)); b.close()",
                str(store),
            ],
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        )
        assert other.stdout.strip() == "3"
        b.commit_offset("g", "IA", 0, 5)
    with Broker.open(store, **SETTINGS) as b:
        assert b.committed_offset("g", "IA", 0) == 5


def test_the_scrubber_reports_damage_in_a_running_broker(
    template: Template, tmp_path: Path
) -> None:
    store, records = _copy(template, tmp_path)
    with Broker.open(store, **SETTINGS) as b:
        off, size, body = records[100]
        path = store / "commitlog" / f"{off - off % SETTINGS['segment_size']:020d}"
        with open(path, "r+b") as fh:
            fh.seek(off % SETTINGS["segment_size"] + size - 30)
            fh.write(b"\xff")
        found = b.store.scrubber.scrub_once()
        assert [(d.start, d.end) for d in found] == [(off, off + size)]
        assert b.store.quarantine.known(off)
        assert body not in _pulled(b)
        assert b.store.scrubber.scrub_once() == []  # reported once


def test_a_stale_record_past_a_torn_tail_is_not_resurrected(
    tmp_path: Path,
) -> None:
    """A killed appender's leftovers beyond the committed end: a torn record,
    then a whole record that was never committed and reuses the queue offset
    a committed record took since. Recovery must cut at the torn record (as
    RocketMQ does), not step over it: the stale record would replace the
    committed one in the consume queue and lose an acknowledged message."""
    import struct
    import zlib

    from broker_core.record import HEADER, MAGIC_V1, PROPS_LEN, prop_crc

    store = tmp_path / "store"
    with Broker.open(store, **SETTINGS) as b:
        b.send(Message("MP", b"A", queue_id=0))
        r = b.send(Message("MP", b"acked", queue_id=0))
        assert r.queue_offset == 1
        end = b.store.state.commit_pos
    # Leftovers past the end: 120 torn bytes, then a whole stale record with
    # queue offset 1 that names its own position.
    torn = b"\xab" * 120
    phys = end + len(torn)
    body = b"stale"
    props = b"UNIQ_KEY\x01STALE\x02"
    suffix = b"\x02MP" + PROPS_LEN.pack(len(props) + 20) + props
    total = HEADER.size + len(body) + len(suffix) + 20
    ip = bytes([127, 0, 0, 1])
    head = HEADER.pack(
        total, MAGIC_V1, zlib.crc32(body) & 0x7FFFFFFF, 0, 0, 1, phys, 0, 1,
        ip, 1, 1, ip, 1, 0, 0, len(body),
    )  # fmt: skip
    record = (
        head
        + body
        + suffix
        + prop_crc(zlib.crc32(head, zlib.crc32(suffix)) & 0x7FFFFFFF)
    )
    seg = SETTINGS["segment_size"]
    with open(store / "commitlog" / f"{end - end % seg:020d}", "r+b") as fh:
        fh.seek(end % seg)
        fh.write(torn + record)
    (store / "abort").write_text("1")  # as if killed
    assert struct.unpack(">i", record[4:8])[0] == MAGIC_V1
    with Broker.open(store, **SETTINGS) as b:
        info = b.store.recovery_info
        assert info is not None and info.log_end == end and info.truncated
        r = b.pull("g", "MP", 0, 0, 10)
        assert [m.body for m in r.messages] == [b"A", b"acked"]


def test_a_blank_marker_written_over_records_is_damage_not_a_segment_end(
    template: Template, tmp_path: Path
) -> None:
    """Eight bytes over record 100 of the first segment that read as its
    end-of-segment marker (the right length and magic): every reader used to
    end the segment there, so ``verify`` said OK and the records after it
    vanished. A blank with records after it is damage: only record 100 is."""
    import struct

    from broker_core.record import BLANK_MAGIC

    store, records = _copy(template, tmp_path)
    size = SETTINGS["segment_size"]
    in_first = [r for r in records if r[0] < size]
    off, rsize, _body = in_first[len(in_first) // 2]
    path = store / "commitlog" / f"{0:020d}"
    with open(path, "r+b") as fh:
        fh.seek(off)
        fh.write(struct.pack(">ii", size - off, BLANK_MAGIC))
    report = verify_store(store)
    assert not report.ok
    assert [(d["start"], d["end"]) for d in report.damaged] == [(off, off + rsize)]
    assert report.records == len(records) - 1
    with Broker.open(store, **SETTINGS) as br:
        assert len(_pulled(br)) == len(records) - 1
        assert len(list(br.store.iter_messages())) == len(records) - 1
    repaired = repair_and_verify(store)
    assert [(q["offset"], q["length"]) for q in repaired.quarantined] == [(off, rsize)]
    assert repaired.records == len(records) - 1 and not repaired.damaged


def test_a_damaged_last_record_that_was_flushed_keeps_its_offset(
    tmp_path: Path,
) -> None:
    """One flipped byte in the last record of a cleanly closed store (sent,
    flushed, acknowledged): recovery used to cut it, and the next message took
    its log and queue offsets, so the old offset id named another message. It
    is quarantined and stepped over; the next message goes after it."""
    store = tmp_path / "store"
    with Broker.open(store, **SETTINGS) as br:
        first = br.send(Message("IA", b"amount=100", queue_id=0))
        last = br.send(Message("IA", b"amount=200", queue_id=0))
    path = store / "commitlog" / f"{0:020d}"
    with open(path, "r+b") as fh:
        fh.seek(last.commit_log_offset + 30)
        b = fh.read(1)
        fh.seek(last.commit_log_offset + 30)
        fh.write(bytes([b[0] ^ 0x40]))
    with Broker.open(store, **SETTINGS) as br:
        info = br.store.recovery_info
        assert info is not None
        assert [q.offset for q in info.quarantined] == [last.commit_log_offset]
        again = br.send(Message("IA", b"amount=300", queue_id=0))
        assert again.commit_log_offset > last.commit_log_offset
        assert again.queue_offset == 2
        bodies = [m.body for m in br.pull("c", "IA", 0, 0, 10).messages]
        assert bodies == [b"amount=100", b"amount=300"]
        assert br.get_message(first.offset_msg_id).body == b"amount=100"
        with pytest.raises(BrokerError) as gone:
            br.get_message(last.offset_msg_id)
        assert "amount" not in str(gone.value)


def test_a_look_up_checks_records_this_run_appended(tmp_path: Path) -> None:
    """A byte flipped on disk in a message sent since the store opened: a
    look-up by id (the console's message page, resend) used to serve the
    altered body; it now raises as for older records."""
    from broker_core.errors import CorruptRecordError

    with Broker.open(tmp_path / "store", **SETTINGS) as br:
        sent = br.send(Message("IA", b"amount=100", queue_id=0))
        assert br.get_message(sent.offset_msg_id).body == b"amount=100"
        path = tmp_path / "store" / "commitlog" / f"{0:020d}"
        data = path.read_bytes()
        at = data.index(b"amount=100", sent.commit_log_offset) + len("amount=")
        with open(path, "r+b") as fh:
            fh.seek(at)
            fh.write(b"9")
        with pytest.raises(CorruptRecordError):
            br.get_message(sent.offset_msg_id)


@pytest.mark.crash
@pytest.mark.parametrize("flush", ["sync", "async"])
def test_a_damaged_last_record_acknowledged_before_a_kill_keeps_its_offset(
    tmp_path: Path, flush: str
) -> None:
    """As above, but the process was SIGKILLed (no checkpoint past its last
    sends): the commit position it left in ``state`` says the record was
    committed, so it is stepped over, not cut as a torn tail."""
    import os
    import signal

    store = tmp_path / "store"
    child = (
        "import sys, time\n"
        "from broker_core import Broker, Message\n"
        f"b = Broker.open(sys.argv[1], flush={flush!r}, segment_size=65536)\n"
        "for i in range(20):\n"
        "    r = b.send(Message('IA', b'x' * 100, queue_id=0))\n"
        "print(r.commit_log_offset, r.queue_offset, flush=True)\n"
        "time.sleep(60)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", child, str(store)], stdout=subprocess.PIPE, text=True
    )
    try:
        off, qoff = map(int, proc.stdout.readline().split())  # type: ignore[union-attr]
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    with open(store / "commitlog" / f"{0:020d}", "r+b") as fh:
        fh.seek(off + 4)  # the record's magic
        b = fh.read(1)
        fh.seek(off + 4)
        fh.write(bytes([b[0] ^ 0xFF]))
    with Broker.open(store, segment_size=65536) as br:
        info = br.store.recovery_info
        assert info is not None and info.abnormal
        assert [q.offset for q in info.quarantined] == [off]
        assert info.quarantined[0].action == "skipped"
        again = br.send(Message("IA", b"new", queue_id=0))
        assert again.commit_log_offset > off and again.queue_offset == qoff + 1


def test_a_blank_marker_with_zeros_after_it_is_reported_by_verify(
    template: Template, tmp_path: Path
) -> None:
    """The marker over a record and zeros to the segment's end: to the log a
    whole blank, but the queues name the records it hid, and verify says so
    (it said OK, with 110 messages gone)."""
    import struct

    from broker_core.record import BLANK_MAGIC

    store, records = _copy(template, tmp_path)
    size = SETTINGS["segment_size"]
    in_first = [r for r in records if r[0] < size]
    off = in_first[len(in_first) // 2][0]
    lost = [r for r in in_first if r[0] >= off]
    path = store / "commitlog" / f"{0:020d}"
    with open(path, "r+b") as fh:
        fh.seek(off)
        fh.write(struct.pack(">ii", size - off, BLANK_MAGIC) + bytes(size - off - 8))
    report = verify_store(store)
    assert not report.ok
    named = [p for p in report.problems if "name no record" in p]
    assert named and sum(int(p.split(": ")[1].split()[0]) for p in named) == len(lost)
