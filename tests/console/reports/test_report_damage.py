"""The report damage suite: real damage to a real store, real Spark runs.

Every case either fails the run naming the damage and ``broker_core verify``,
or (with "skip damaged") succeeds and says exactly how many stretches and
bytes it stepped over; or, where nothing is lost (a corrupt export chunk, a
different store at the same path, a store opened without its segment size),
succeeds with the true figures. Never SUCCEEDED with a wrong figure.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from broker_core import Broker, Message

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.django_db]

SEGMENT = 64 * 1024
MESSAGES = 900  # ~250 bytes each: four 64 KiB segments


def _fill(
    path: Path, count: int = MESSAGES, topics: tuple[str, ...] = ("a", "b")
) -> None:
    with Broker.open(str(path), segment_size=SEGMENT) as broker:
        for i in range(count):
            broker.send(
                Message(
                    topics[i % len(topics)],
                    b"body-%05d-" % i + b"x" * 100,
                    tags="paid",
                    properties={"region": "eu"},
                )
            )


@pytest.fixture
def store(settings, tmp_path):
    path = tmp_path / "store"
    _fill(path)
    settings.BROKER_STORE_DIR = path
    # The console opens the store with no sizes: the store's own must win.
    settings.BROKER_STORE_OPTIONS = {}
    settings.REPORTS_DIR = tmp_path / "reports"
    return path


def _victim(store: Path) -> tuple[Path, int, int]:
    """Return (segment file, position in it, record size) of one message in
    the second segment."""
    with Broker.open(str(store)) as broker:
        offset = 0
        while True:
            (m,) = broker.pull("probe", "a", 0, offset, max_messages=1).messages
            if m.commit_log_offset > SEGMENT + 100:
                break
            offset += 20
    base = m.commit_log_offset // SEGMENT * SEGMENT
    return (
        store / "commitlog" / f"{base:020d}",
        m.commit_log_offset - base,
        m.store_size,
    )


def _flip(segment: Path, at: int) -> None:
    data = bytearray(segment.read_bytes())
    data[at] ^= 0x01
    segment.write_bytes(bytes(data))


def _field(segment: Path, pos: int, size: int, needle: bytes) -> int:
    """The position of ``needle`` inside the record at ``pos``."""
    data = segment.read_bytes()[pos : pos + size]
    at = data.index(needle)
    return pos + at


def _run(**kwargs):
    from console.reports import services

    return services.run_now("topic_traffic", **kwargs)


@pytest.mark.parametrize(
    "part", ["tag", "store_timestamp", "property", "body", "header"]
)
def test_a_flipped_byte_fails_the_run_or_is_skipped_exactly(store, part) -> None:
    segment, pos, size = _victim(store)
    at = {
        "tag": lambda: _field(segment, pos, size, b"TAGS\x01paid") + 5,
        "store_timestamp": lambda: pos + 56 + 7,
        "property": lambda: _field(segment, pos, size, b"region\x01eu") + 7,
        "body": lambda: _field(segment, pos, size, b"body-") + 6,
        "header": lambda: pos + 12 + 3,  # the queue id
    }[part]()
    _flip(segment, at)

    failed = _run()
    assert failed.status == "FAILED"
    assert "damaged" in failed.error and "broker_core verify" in failed.error
    assert f"{size:,} bytes" in failed.error

    skipped = _run(skip_damaged=True)
    assert skipped.status == "SUCCEEDED", skipped.error
    assert skipped.summary["messages"] == MESSAGES - 1
    assert skipped.summary["busiest_topics"] == {"a": 449, "b": 450}
    assert skipped.summary["skipped_damaged"]["stretches"] == 1
    assert skipped.summary["skipped_damaged"]["bytes"] == size


def test_zeros_inside_the_log_are_counted_not_taken_for_its_end(store) -> None:
    segment, pos, size = _victim(store)
    data = bytearray(segment.read_bytes())
    data[pos : pos + 4096] = bytes(4096)
    segment.write_bytes(bytes(data))

    failed = _run()
    assert failed.status == "FAILED" and "damaged" in failed.error
    skipped = _run(skip_damaged=True)
    assert skipped.status == "SUCCEEDED", skipped.error
    lost = MESSAGES - skipped.summary["messages"]
    assert lost > 10  # 4 KiB of ~250-byte records
    assert skipped.summary["skipped_damaged"]["bytes"] >= 4096


@pytest.mark.parametrize("which", ["middle", "last"])
def test_a_deleted_segment_fails_the_run(store, which) -> None:
    segments = sorted((store / "commitlog").iterdir())
    assert len(segments) >= 4
    (segments[1] if which == "middle" else segments[-1]).unlink()
    for skip in (False, True):  # nothing to report on: the log has a hole
        run = _run(skip_damaged=skip)
        assert run.status == "FAILED"
        assert "commit log is incomplete" in run.error
        assert "broker_core verify" in run.error


def test_a_deleted_last_segment_fails_the_run_after_the_store_reopened(
    store,
) -> None:
    """The store opened (recovery lists the lost bytes in quarantine/, the log
    ends earlier): the run fails naming them, or skips them and says so (it
    SUCCEEDED with 18 messages fewer and no word)."""
    last = sorted((store / "commitlog").iterdir())[-1]
    gone = last.stat().st_size
    with Broker.open(str(store)) as b:  # counts what is left
        before = sum(1 for _ in b.store.iter_messages())
    last.unlink()
    with Broker.open(str(store)) as b:
        left = sum(1 for m in b.store.iter_messages() if m.topic in ("a", "b"))
    assert 0 < left < MESSAGES <= before
    failed = _run()
    assert failed.status == "FAILED", failed.summary
    assert "broker_core verify" in failed.error
    skipped = _run(skip_damaged=True)
    assert skipped.status == "SUCCEEDED", skipped.error
    assert skipped.summary["messages"] == left
    assert skipped.summary["skipped_damaged"]["stretches"] == 1
    assert 0 < skipped.summary["skipped_damaged"]["bytes"] <= gone


def test_a_damaged_state_file_fails_the_run_and_the_next_one_is_right(
    store,
) -> None:
    """One bit of the state file's commit position flipped (no checksum): the
    run fails naming it (it SUCCEEDED with 784 of 2,000 messages); after
    verify --repair, the export made before does not resume mid-record."""
    import struct

    from broker_core import shared
    from broker_core.verify import repair_store

    first = _run()  # an export up to the true end
    assert first.status == "SUCCEEDED" and first.summary["messages"] == MESSAGES
    state = store / "state"
    raw = bytearray(state.read_bytes())
    (end,) = struct.unpack_from("@q", raw, shared.COMMIT_AT)
    struct.pack_into("@q", raw, shared.COMMIT_AT, end // 3)
    state.write_bytes(bytes(raw))
    failed = _run()
    assert failed.status == "FAILED", failed.summary
    assert "state file" in failed.error and "verify" in failed.error
    repair_store(store)
    again = _run()
    assert again.status == "SUCCEEDED", again.error
    assert again.summary["messages"] == MESSAGES


def test_a_truncated_middle_segment_fails_the_run(store) -> None:
    segment = sorted((store / "commitlog").iterdir())[1]
    with open(segment, "r+b") as fh:
        fh.truncate(SEGMENT // 2)
    run = _run()
    assert run.status == "FAILED" and "holds 32,768 of 65,536 bytes" in run.error


def test_another_store_at_the_same_path_is_exported_afresh(store) -> None:
    first = _run()
    assert first.summary["messages"] == MESSAGES
    shutil.rmtree(store)
    _fill(store, 2000, topics=("other",))  # longer: once taken as the log grown
    again = _run()
    assert again.status == "SUCCEEDED", again.error
    assert again.summary["messages"] == 2000
    assert again.summary["busiest_topics"] == {"other": 2000}


def test_a_damaged_export_chunk_is_rebuilt(store) -> None:
    from console.reports import services

    assert _run().summary["messages"] == MESSAGES
    parts = sorted((Path(services.export_dir()) / "chunks").rglob("*.parquet"))
    assert parts
    for part in parts:  # the footer, then a data page
        data = bytearray(part.read_bytes())
        for at in (len(data) - 20, len(data) // 3):
            data[at] ^= 0xFF
        part.write_bytes(bytes(data))
    again = _run()
    assert again.status == "SUCCEEDED", again.error
    assert again.summary["messages"] == MESSAGES


def test_unreadable_offsets_use_the_backup_or_fail(store, settings) -> None:
    from console.reports import services

    offsets = store / "config" / "consumerOffset.json"
    table = {"offsetTable": {"a@g1": {"0": 100}, "b@g2": {"1": 50}}}
    offsets.with_name("consumerOffset.json.bak").write_text(json.dumps(table))
    offsets.write_bytes(b"{\x00garbage")
    run = services.run_now("consumer_lag")
    assert run.status == "SUCCEEDED", run.error
    assert run.summary["groups"] == 2  # from the .bak, not 0

    offsets.with_name("consumerOffset.json.bak").write_bytes(b"also garbage")
    failed = services.run_now("consumer_lag")
    assert failed.status == "FAILED"
    assert "consumer offsets cannot be read" in failed.error
    assert "broker_core verify" in failed.error


def test_a_store_opened_without_its_segment_size_loses_nothing(store) -> None:
    # The console's web process opens the store with the 1 GiB default.
    with Broker.open(str(store)) as broker:
        assert broker.store.config.segment_size == SEGMENT
        broker.send(Message("a", b"late"))
    run = _run()
    assert run.status == "SUCCEEDED", run.error
    assert run.summary["messages"] == MESSAGES + 1
