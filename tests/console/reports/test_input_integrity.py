"""A report run never succeeds on input it could not read (real Spark, real
stores, real byte flips): a missing store, a damaged record and an export whose
chunks went missing each give a failed run with the reason, or, when the
analyst chooses to skip damaged records, a run that says what it skipped."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker_core import Broker, Message

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.django_db]

MESSAGES = 300


@pytest.fixture
def store(settings, tmp_path):
    path = tmp_path / "store"
    with Broker.open(str(path)) as broker:
        for i in range(MESSAGES):
            broker.send(Message(("a", "b")[i % 2], b"body-%05d" % i))
    settings.BROKER_STORE_DIR = path
    settings.BROKER_STORE_OPTIONS = {}
    settings.REPORTS_DIR = tmp_path / "reports"
    return path


def _messages(run) -> int:
    return run.summary["messages"]


def test_a_missing_store_fails_the_run(spark, settings, tmp_path) -> None:
    from console.reports import services

    settings.BROKER_STORE_DIR = tmp_path / "nowhere"
    settings.REPORTS_DIR = tmp_path / "reports"
    run = services.run_now("topic_traffic")
    assert run.status == "FAILED"
    assert "there is no store at" in run.error and "Traceback" not in run.error


def test_a_damaged_record_fails_the_run_unless_skipped(spark, store) -> None:
    from console.reports import services

    # (Damage after a run does not matter to later runs: the export already
    # holds those records, decoded while they were intact.)
    with Broker.open(str(store)) as broker:
        (victim,) = broker.pull("probe", "a", 0, 10, max_messages=1).messages
        offset = victim.commit_log_offset
    seg = sorted((store / "commitlog").iterdir())[0]
    data = bytearray(seg.read_bytes())
    data[offset + 4 : offset + 8] = b"\xde\xad\xbe\xef"  # the record's magic
    seg.write_bytes(bytes(data))

    failed = services.run_now("topic_traffic")
    assert failed.status == "FAILED"
    assert "damaged or quarantined" in failed.error
    assert "broker_core verify" in failed.error

    skipped = services.run_now("topic_traffic", skip_damaged=True)
    assert skipped.status == "SUCCEEDED", skipped.error
    assert _messages(skipped) == MESSAGES - 1  # the rest, all of it
    assert skipped.summary["skipped_damaged"]["stretches"] == 1


def test_a_blank_marker_over_records_fails_the_run_unless_skipped(spark, store) -> None:
    """Eight bytes over a record that read as the segment's end marker (its
    length reaching the segment's end, its magic): the scanner used to stop
    there and the run SUCCEEDED with the records before it only."""
    import struct

    from broker_core.record import BLANK_MAGIC
    from console.reports import services

    with Broker.open(str(store)) as broker:
        (victim,) = broker.pull("probe", "a", 0, 10, max_messages=1).messages
        offset = victim.commit_log_offset
    seg = sorted((store / "commitlog").iterdir())[0]
    size = seg.stat().st_size
    with open(seg, "r+b") as fh:
        fh.seek(offset)
        fh.write(struct.pack(">ii", size - offset, BLANK_MAGIC))

    failed = services.run_now("topic_traffic")
    assert failed.status == "FAILED"
    assert "damaged or quarantined" in failed.error

    skipped = services.run_now("topic_traffic", skip_damaged=True)
    assert skipped.status == "SUCCEEDED", skipped.error
    assert _messages(skipped) == MESSAGES - 1
    assert skipped.summary["skipped_damaged"]["stretches"] == 1


def test_an_export_with_missing_chunks_is_rebuilt(spark, store) -> None:
    import shutil

    from console.reports import services

    first = services.run_now("topic_traffic")
    assert _messages(first) == MESSAGES
    chunks = Path(services.export_dir()) / "chunks"
    shutil.rmtree(chunks)  # deleted by hand, a disk cleaned up...
    again = services.run_now("topic_traffic")
    assert again.status == "SUCCEEDED", again.error
    assert _messages(again) == MESSAGES  # not 0: the export was rebuilt


def test_a_current_export_is_not_rebuilt_and_new_log_is_added(spark, tmp_path) -> None:
    """An export that is current is left as it is (its end is no record's
    start: it was taken for a damaged resume point and rebuilt on every
    call, 56 s at 10M messages), and new log after a segment's end filler is
    added to it, not rebuilt."""
    from console.reports.jobs import reader

    path = tmp_path / "s"
    with Broker.open(str(path), segment_size=64 * 1024) as b:
        for i in range(100):
            b.send(Message("t", b"x" * 200 + b"%d" % i))
    export = tmp_path / "export"
    first = reader.export_log(spark, path, export)
    assert first.rows == 100
    again = reader.export_log(spark, path, export)
    assert (again.rebuilt, again.rows) == (False, 0)
    with Broker.open(str(path), segment_size=64 * 1024) as b:
        for i in range(400):  # past the first segment's end
            b.send(Message("t", b"y" * 200 + b"%d" % i))
    grown = reader.export_log(spark, path, export)
    assert (grown.rebuilt, grown.rows) == (False, 400)
    more = reader.export_log(spark, path, export)
    assert (more.rebuilt, more.rows) == (False, 0)
