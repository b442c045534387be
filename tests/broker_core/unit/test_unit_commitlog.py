"""CommitLog on its own (with the SegmentQueue and Segments under it).

Records are written with ``CommitLog.write`` exactly as the append path lays
them out (``_records.fill_log``); damage is real bytes changed in the segment
files between a close and a reopen.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from broker_core.commitlog import CommitLog, Damage
from broker_core.errors import (
    CorruptRecordError,
    MessageNotFoundError,
    MessageTooLargeError,
)
from broker_core.record import BLANK, BLANK_MAGIC, SKIP_MAGIC
from broker_core.segment import Segment, offset_to_name
from broker_core.segment_queue import SegmentQueue
from tests.broker_core.unit._records import (
    fill_log,
    flip,
    patch,
    record_at,
    segment_file,
)

SEG = 1024
#: Eight records of 166 bytes: six fill segment 0, the seventh starts segment 1.
BODIES = [bytes([65 + i]) * 50 for i in range(8)]


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "store"


def written(root: Path, bodies: list[bytes] = BODIES) -> tuple[list, int]:
    """Write ``bodies`` into a fresh log at ``root`` and close it."""
    log = CommitLog(root, SEG)
    placed, end = fill_log(log, bodies)
    log.close()
    return placed, end


def scan_offsets(log: CommitLog, **kw: object) -> list[int]:
    return [seg.base + pos for seg, pos, _ in log.scan(0, **kw)]  # type: ignore[arg-type]


# -- layout, rollover, reading ------------------------------------------------


def test_first_record_round_trip_and_fields(root: Path) -> None:
    log = CommitLog(root, SEG)
    placed, end = fill_log(log, [b"hello", b"world"])
    assert placed == [(0, 121), (121, 121)] and end == 242
    m = log.read_message(0, end)
    assert (m.body, m.topic, m.commit_log_offset, m.queue_offset) == (
        b"hello",
        "T",
        0,
        0,
    )
    m2 = log.read_message(121, end)
    assert (m2.body, m2.commit_log_offset, m2.queue_offset) == (b"world", 121, 1)
    assert m2.store_size == 121
    log.close()


def test_segment_rollover_writes_a_blank_and_names_files_by_offset(
    root: Path,
) -> None:
    log = CommitLog(root, SEG)
    placed, end = fill_log(log, BODIES)
    offsets = [o for o, _ in placed]
    # 166-byte records: six fit the first 1024 bytes (996 + 166 + 8 > 1024).
    assert offsets[:7] == [0, 166, 332, 498, 664, 830, SEG]
    assert end == SEG + 2 * 166
    assert sorted(os.listdir(root / "commitlog")) == [
        "00000000000000000000",
        "00000000000000001024",
    ]
    assert offset_to_name(SEG) == "00000000000000001024"
    raw = segment_file(root, 0).read_bytes()
    assert len(raw) == SEG  # created at full size
    assert BLANK.unpack_from(raw, 996) == (SEG - 996, BLANK_MAGIC)
    assert log.blank(996) == raw[996:1004]
    assert (log.first_offset(), log.last_segment_base()) == (0, SEG)
    # Last record of segment 0 and first record of segment 1.
    assert log.read_message(830, end).body == BODIES[5]
    assert log.read_message(SEG, end).body == BODIES[6]
    with pytest.raises(MessageNotFoundError):
        log.read_message(996, end)  # the blank is no record
    assert scan_offsets(log) == offsets
    assert log.last_end == end and not log.stopped_on_corruption
    log.close()


def test_segment_end_and_record_size_limit(root: Path) -> None:
    log = CommitLog(root, SEG)
    assert [log.segment_end(p) for p in (0, 1, SEG - 1, SEG, 5000)] == [
        SEG,
        SEG,
        SEG,
        2 * SEG,
        5 * SEG,
    ]
    log.check_fits_segment(SEG - 8)  # room left for the blank: fits
    with pytest.raises(MessageTooLargeError):
        log.check_fits_segment(SEG - 7)
    log.close()


def test_read_outside_the_log_or_inside_a_record_is_not_found(root: Path) -> None:
    log = CommitLog(root, SEG)
    placed, end = fill_log(log, BODIES[:3])
    for bad in (-1, end, end + 10):
        with pytest.raises(MessageNotFoundError):
            log.read_message(bad, end)
    with pytest.raises(MessageNotFoundError):
        log.read_message(1, end)  # inside the first record
    # A record that the commit position cuts is not served yet.
    last_off, last_size = placed[-1]
    with pytest.raises(MessageNotFoundError):
        log.read_message(last_off, last_off + last_size - 1)
    assert log.read_message(last_off, last_off + last_size).body == BODIES[2]
    # Past every segment file.
    with pytest.raises(MessageNotFoundError, match="no commit-log segment"):
        log.read_message(5 * SEG, 6 * SEG)
    with pytest.raises(MessageNotFoundError):
        log.decode_at(5 * SEG, 166)
    log.close()


def test_scan_from_the_end_or_past_it_yields_nothing(root: Path) -> None:
    log = CommitLog(root, SEG)
    _, end = fill_log(log, BODIES)
    assert list(log.scan(end)) == [] and log.last_end == end
    assert list(log.scan(7 * SEG)) == [] and log.last_end == 7 * SEG
    # ``end`` bounds a scan: the record that ``end`` cuts is not yielded.
    got = [seg.base + pos for seg, pos, _ in log.scan(0, end=166 + 165)]
    assert got == [0]
    log.close()


def test_persistence_across_close_and_reopen(root: Path) -> None:
    placed, end = written(root)
    log = CommitLog(root, SEG)
    assert scan_offsets(log, verify_crc=True) == [o for o, _ in placed]
    assert [log.read_message(o, end).body for o, _ in placed] == BODIES
    assert [log.decode_at(o, n).body for o, n in placed] == BODIES
    assert log.decode_at(placed[3][0]).body == BODIES[3]  # size read from the log
    log.close()


def test_a_blank_with_no_next_segment_ends_the_data(root: Path) -> None:
    log = CommitLog(root, SEG)
    placed, end = fill_log(log, BODIES[:6])
    log.write(end, [log.blank(end)])  # the next record would start segment 1
    assert [seg.base + pos for seg, pos, _ in log.scan(0)] == [o for o, _ in placed]
    assert log.last_end == SEG and not log.stopped_on_corruption
    log.close()


# -- damage ------------------------------------------------------------------


def test_a_flipped_body_byte_is_never_served(root: Path) -> None:
    placed, end = written(root)
    off, size = placed[2]
    flip(segment_file(root, 0), off + 88 + 10)  # inside the body
    log = CommitLog(root, SEG)
    with pytest.raises(CorruptRecordError):
        log.read_message(off, end)
    with pytest.raises(CorruptRecordError):
        log.decode_at(off, size)
    # The neighbours are untouched.
    assert log.read_message(placed[1][0], end).body == BODIES[1]
    assert log.read_message(placed[3][0], end).body == BODIES[3]
    # Structure alone does not see it; the CRCs do, and the scan goes on.
    assert off in scan_offsets(log)
    damage: list[Damage] = []
    got = scan_offsets(log, verify_crc=True, damage=damage, tail_hint=end)
    assert got == [o for o, _ in placed if o != off]
    assert damage == [Damage(off, off + size, "corrupt")]
    assert log.last_end == end and not log.stopped_on_corruption
    log.close()


@pytest.mark.parametrize("at", [0, 5, 20, 28, 60, 88 + 49, 88 + 50, 160, 165])
def test_any_damaged_byte_of_a_record_is_detected(root: Path, at: int) -> None:
    """Header (size, magic, queue offset, log offset, store time), body, topic,
    properties and the record CRC itself are all covered."""
    placed, end = written(root, BODIES[:3])
    off, size = placed[1]
    flip(segment_file(root, 0), off + at, 0x01)
    log = CommitLog(root, SEG)
    with pytest.raises(MessageNotFoundError):  # CorruptRecordError is one too
        log.read_message(off, end)
    damage: list[Damage] = []
    got = scan_offsets(log, verify_crc=True, damage=damage, tail_hint=end)
    assert got == [placed[0][0], placed[2][0]]
    assert [(d.start, d.end) for d in damage] == [(off, off + size)]
    log.close()


def test_records_appended_by_this_run_are_trusted(root: Path) -> None:
    """``trusted_from``: below it consumers' reads (``decode_at``) check CRCs,
    at or above it only the record's structure (and still refuse a phantom
    offset). A look-up by offset (``read_message``) checks them everywhere."""
    placed, end = written(root, BODIES[:3])
    off, size = placed[1]
    flip(segment_file(root, 0), off + 88 + 1)
    log = CommitLog(root, SEG)
    with pytest.raises(CorruptRecordError):
        log.decode_at(off, size)
    log.trusted_from = lambda: off  # records from ``off`` on were appended now
    assert log.decode_at(off, size).commit_log_offset == off
    with pytest.raises(CorruptRecordError):
        log.read_message(off, end)
    with pytest.raises(MessageNotFoundError):
        log.decode_at(off + 1, size)  # not a record start
    with pytest.raises(MessageNotFoundError):
        log.decode_at(off, size + 1)  # not this record's size
    log.close()


def test_a_torn_last_record_ends_the_scan(root: Path) -> None:
    placed, end = written(root, BODIES[:4])
    off, size = placed[-1]
    patch(segment_file(root, 0), off + size // 2, bytes(size - size // 2))
    log = CommitLog(root, SEG)
    for hint in (None, off, end):
        damage: list[Damage] = []
        got = scan_offsets(log, verify_crc=True, damage=damage, tail_hint=hint)
        assert got == [o for o, _ in placed[:-1]], hint
        assert log.last_end == off and log.stopped_on_corruption
        assert damage == [Damage(off, -1, "tail")]
    with pytest.raises(MessageNotFoundError):
        log.read_message(off, end)
    log.close()


def test_a_segment_file_cut_short_reopens_with_zeros_past_the_cut(
    root: Path,
) -> None:
    placed, end = written(root, BODIES[:4])
    off, size = placed[-1]
    path = segment_file(root, 0)
    os.truncate(path, off + 40)  # a crash left the file short, mid-record
    log = CommitLog(root, SEG)
    got = scan_offsets(log, verify_crc=True)
    assert got == [o for o, _ in placed[:-1]]
    assert log.last_end == off and log.stopped_on_corruption
    assert path.stat().st_size == SEG  # mapped at its full size again
    log.close()


def test_readonly_log_reports_a_missing_range_of_a_short_file(root: Path) -> None:
    """Read-only (``verify``): a short segment is mapped as it is and the bytes
    it lacks are ``missing``; the scan goes on in the next segment."""
    placed, end = written(root)
    cut = placed[3][0]  # a record boundary of segment 0
    path = segment_file(root, 0)
    os.truncate(path, cut)
    log = CommitLog(root, SEG, readonly=True)
    damage: list[Damage] = []
    got = scan_offsets(log, damage=damage, tail_hint=end)
    assert got == [o for o, _ in placed if o < cut or o >= SEG]
    assert damage == [Damage(cut, SEG, "missing")]
    assert log.last_end == end
    assert path.stat().st_size == cut  # never extended
    with pytest.raises(MessageNotFoundError):
        log.read_message(placed[4][0], end)
    log.close()


def test_zeroed_record_below_the_commit_position_is_stepped_over(
    root: Path,
) -> None:
    placed, end = written(root)
    off, size = placed[2]
    patch(segment_file(root, 0), off, bytes(size))
    log = CommitLog(root, SEG)
    damage: list[Damage] = []
    got = scan_offsets(log, verify_crc=True, damage=damage, tail_hint=end)
    assert got == [o for o, _ in placed if o != off]
    assert damage == [Damage(off, off + size, "end")]
    # Without a hint too: valid records follow, so the zeros are no end.
    damage = []
    assert scan_offsets(log, damage=damage) == got
    assert damage == [Damage(off, off + size, "end")]
    assert not log.stopped_on_corruption
    log.close()


def test_damage_with_no_record_after_it_resumes_in_the_next_segment(
    root: Path,
) -> None:
    placed, end = written(root)
    off, size = placed[5]  # the last record of segment 0, before the blank
    flip(segment_file(root, 0), off + 4)  # its magic
    log = CommitLog(root, SEG)
    damage: list[Damage] = []
    got = scan_offsets(log, verify_crc=True, damage=damage, tail_hint=end)
    assert got == [o for o, _ in placed if o != off]
    assert damage == [Damage(off, SEG, "corrupt")]
    log.close()


def test_a_record_copied_to_another_offset_is_not_this_logs(root: Path) -> None:
    """A whole, CRC-valid record whose header names another offset (a stale
    record from before a truncation) is damage, not a record."""
    placed, end = written(root, BODIES[:4])
    (a, size), (b, size_b) = placed[0], placed[2]
    assert size == size_b
    path = segment_file(root, 0)
    patch(path, b, path.read_bytes()[a : a + size])
    log = CommitLog(root, SEG)
    with pytest.raises(CorruptRecordError):
        log.read_message(b, end)
    damage: list[Damage] = []
    got = scan_offsets(log, verify_crc=True, damage=damage, tail_hint=end)
    assert got == [placed[0][0], placed[1][0], placed[3][0]]
    assert damage == [Damage(b, b + size, "corrupt")]
    log.close()


def test_a_quarantined_range_is_stepped_over_silently(root: Path) -> None:
    placed, end = written(root, BODIES[:4])
    off, size = placed[1]
    patch(segment_file(root, 0), off, BLANK.pack(size, SKIP_MAGIC))
    log = CommitLog(root, SEG)
    damage: list[Damage] = []
    got = scan_offsets(log, verify_crc=True, damage=damage, tail_hint=end)
    assert got == [placed[0][0], placed[2][0], placed[3][0]]
    assert damage == [] and log.last_end == end
    with pytest.raises(MessageNotFoundError):
        log.read_message(off, end)
    log.close()


# -- truncate, discard ---------------------------------------------------------


def test_truncate_cuts_the_rest_of_the_segment_and_later_segments(
    root: Path,
) -> None:
    log = CommitLog(root, SEG)
    bodies = [bytes([97 + i % 26]) * 50 for i in range(14)]  # three segments
    placed, end = fill_log(log, bodies)
    assert log.segments.list_bases() == [0, SEG, 2 * SEG]
    cut = placed[7][0]  # the second record of segment 1
    assert SEG < cut < 2 * SEG
    log.truncate(cut)
    assert log.segments.list_bases() == [0, SEG]
    assert not segment_file(root, 2 * SEG).exists()
    assert segment_file(root, SEG).read_bytes()[cut - SEG :] == bytes(2 * SEG - cut)
    assert scan_offsets(log) == [o for o, _ in placed[:7]]
    assert log.last_end == cut
    with pytest.raises(MessageNotFoundError):
        log.read_message(cut, end)
    # Appending goes on from the cut, and survives a reopen.
    more, end2 = fill_log(log, [b"again"], start=cut)
    assert more == [(cut, 121)]
    log.close()
    log = CommitLog(root, SEG)
    assert log.read_message(cut, end2).body == b"again"
    assert scan_offsets(log, verify_crc=True)[-1] == cut
    log.close()


def test_discard_zeros_a_failed_append_across_a_segment_boundary(
    root: Path,
) -> None:
    log = CommitLog(root, SEG)
    placed, end = fill_log(log, BODIES)
    start = placed[4][0]
    log.discard(start, end)
    assert scan_offsets(log) == [o for o, _ in placed[:4]]
    assert segment_file(root, 0).read_bytes()[start:] == bytes(SEG - start)
    assert segment_file(root, SEG).read_bytes()[: end - SEG] == bytes(end - SEG)
    log.close()


# -- the segments under the log -----------------------------------------------


def test_segment_queue_finds_creates_and_lists_segments(tmp_path: Path) -> None:
    q = SegmentQueue(tmp_path / "q", 100)
    assert q.list_bases() == [] and q.segment(0) is None  # no directory yet
    seg = q.segment(250, create=True)
    assert seg is not None and (seg.base, seg.size) == (200, 100)
    assert q.segment(299) is seg and q.segment(300) is None
    assert q.base_of(299) == 200 and q.base_of(300) == 300
    (tmp_path / "q" / "notes.txt").write_text("x")  # not a segment name
    (tmp_path / "q" / "123").write_text("x")
    assert q.list_bases() == [200]
    q.close()


def test_segment_queue_readonly_never_creates(tmp_path: Path) -> None:
    q = SegmentQueue(tmp_path / "q", 100, readonly=True)
    assert q.segment(0, create=True) is None
    assert not (tmp_path / "q").exists()
    q.close()


def test_segment_queue_delete_from_zeros_and_drops_later_files(
    tmp_path: Path,
) -> None:
    q = SegmentQueue(tmp_path / "q", 100)
    for base in (0, 100, 200):
        seg = q.segment(base, create=True)
        assert seg is not None
        seg.write(0, b"\x07" * 100)
    q.delete_from(130)
    assert q.list_bases() == [0, 100]
    assert (tmp_path / "q" / offset_to_name(100)).read_bytes() == (
        b"\x07" * 30 + bytes(70)
    )
    assert (tmp_path / "q" / offset_to_name(0)).read_bytes() == b"\x07" * 100
    q.close()


def test_segment_write_is_visible_through_the_mapping_and_another_map(
    tmp_path: Path,
) -> None:
    path = tmp_path / offset_to_name(0)
    a = Segment(path, 0, 4096, create=True)
    b = Segment(path, 0, 4096, create=False)
    a.write(100, b"abc")
    a.write_mapped(200, b"xyz")
    assert bytes(b.view[100:103]) == b"abc" and bytes(b.view[200:203]) == b"xyz"
    a.zero(101, 102)
    assert bytes(b.view[100:103]) == b"a\x00c"
    a.flush()
    a.close()
    b.close()
    with pytest.raises(ValueError):
        a.view[0]  # closed: further access raises
    ro = Segment(path, 0, 8192, create=False, readonly=True)
    assert ro.size == 4096  # mapped as far as the file goes, never extended
    assert bytes(ro.view[200:203]) == b"xyz"
    ro.close()
    with pytest.raises(FileNotFoundError):
        Segment(tmp_path / offset_to_name(4096), 4096, 4096, create=False)


def test_record_helper_matches_the_log_format(root: Path) -> None:
    """The helper's records are what the scan accepts with CRCs required."""
    log = CommitLog(root, SEG)
    rec = record_at(0, b"x")
    log.write(0, [rec])
    assert [(p, n) for _, p, n in log.scan(0, verify_crc=True)] == [(0, len(rec))]
    log.close()
