"""ConsumeQueue and ConsumeQueueTable on their own: 20-byte units in files of
``units_per_file`` units under ``consumequeue/{topic}/{queue id}``."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest

from broker_core.consumequeue import (
    DAMAGED_UNIT_SIZE,
    UNIT_SIZE,
    ConsumeQueue,
    ConsumeQueueTable,
    pack_unit,
    unit_check,
)

PER = 4  # units per file: small, so that files roll over often


def units(first: int, n: int, size: int = 100) -> list[tuple[int, int, int]]:
    """Units for records of ``size`` bytes laid end to end from ``first``."""
    return [(k * size, size, 1000 + k) for k in range(first, first + n)]


def qdir(root: Path, topic: str = "T", qid: int = 0) -> Path:
    return root / "consumequeue" / topic / str(qid)


def files(root: Path, topic: str = "T", qid: int = 0) -> list[str]:
    return sorted(os.listdir(qdir(root, topic, qid)))


def fresh(root: Path, topic: str = "T", qid: int = 0) -> ConsumeQueue:
    return ConsumeQueue(root, topic, qid, PER)


def test_unit_layout_on_disk(tmp_path: Path) -> None:
    assert UNIT_SIZE == 20
    cq = fresh(tmp_path)
    cq.put_units(0, [(123456789, 321, -7), (2**40, 1, 2**62)])
    cq.close()
    raw = (qdir(tmp_path) / f"{0:020d}").read_bytes()
    assert len(raw) == PER * UNIT_SIZE
    # commitLogOffset q | check B + size 3 bytes | tagsCode q, big-endian;
    # tag field at byte 12.
    assert struct.unpack_from(">qBxxxq", raw, 0) == (
        123456789,
        unit_check(123456789, 321, -7),
        -7,
    )
    assert int.from_bytes(raw[9:12], "big") == 321
    assert struct.unpack_from(">q", raw, 20 + 12)[0] == 2**62
    assert raw[40:] == bytes(40)


def test_put_and_read_round_trip(tmp_path: Path) -> None:
    cq = fresh(tmp_path)
    assert (cq.max_offset(), cq.min_offset(), cq.read_units(0, 5)) == (0, 0, [])
    cq.put_units(0, units(0, 3))
    assert cq.max_offset() == 3
    assert cq.read_units(0, 10) == units(0, 3)
    assert cq.read_units(1, 1) == units(1, 1)
    cq.close()


def test_files_roll_over_and_reads_cross_them(tmp_path: Path) -> None:
    cq = fresh(tmp_path)
    cq.put_units(0, units(0, 10))
    assert files(tmp_path) == [f"{b:020d}" for b in (0, 80, 160)]
    assert cq.max_offset() == 10
    # The last unit of a file and the first of the next.
    assert cq.read_units(3, 1) == units(3, 1)
    assert cq.read_units(4, 1) == units(4, 1)
    assert cq.read_units(2, 5) == units(2, 5)
    assert cq.read_units(0, 100) == units(0, 10)
    # Reading at or past the end.
    assert cq.read_units(8, 100) == units(8, 2)
    assert cq.read_units(10, 5) == []
    assert cq.read_units(11, 5) == []
    assert cq.read_units(40, 5) == []  # no file there
    cq.close()


def test_put_packed_across_a_file_boundary(tmp_path: Path) -> None:
    cq = fresh(tmp_path)
    cq.put_packed(0, 3, b"".join(pack_unit(*u) for u in units(0, 3)))
    cq.put_packed(3, 4, b"".join(pack_unit(*u) for u in units(3, 4)))
    assert cq.read_units(0, 10) == units(0, 7)
    assert cq.max_offset() == 7
    assert files(tmp_path) == [f"{b:020d}" for b in (0, 80)]
    cq.close()


@pytest.mark.parametrize("n", [1, 3, 4, 5, 8, 11])
def test_max_offset_is_found_again_after_reopen(tmp_path: Path, n: int) -> None:
    cq = fresh(tmp_path)
    cq.put_units(0, units(0, n))
    cq.flush()
    assert cq.flushed_offset == n
    cq.close()
    again = fresh(tmp_path)
    assert again.cached_max is None
    assert again.max_offset() == n
    assert again.cached_max == n
    assert again.read_units(0, 100) == units(0, n)
    again.close()


def test_units_written_by_another_handle_are_found(tmp_path: Path) -> None:
    """Another process's appends: readers find new units by reading forward."""
    reader, writer = fresh(tmp_path), fresh(tmp_path)
    writer.put_units(0, units(0, 2))
    assert reader.max_offset() == 2
    writer.put_units(2, units(2, 5))
    assert reader.cached_max == 2  # stale until asked again
    assert reader.max_offset() == 7
    assert reader.read_units(5, 10) == units(5, 2)
    reader.close()
    writer.close()


def test_a_zero_size_unit_marks_the_end(tmp_path: Path) -> None:
    cq = fresh(tmp_path)
    cq.put_units(0, units(0, 2) + [(200, 0, 0)])
    cq.put_units(3, [(300, -5, 0)])  # a negative size is no unit either
    cq.put_units(4, units(4, 2))
    assert cq.read_units(0, 10) == units(0, 2)
    assert cq.read_units(3, 10) == []
    assert cq.read_units(4, 10) == units(4, 2)
    cq.close()


def test_queue_that_starts_past_zero(tmp_path: Path) -> None:
    """A queue whose first file is not file 0 (its units start at 8)."""
    cq = fresh(tmp_path)
    cq.put_units(8, units(8, 3))
    cq.close()
    again = fresh(tmp_path)
    assert files(tmp_path) == [f"{8 * UNIT_SIZE:020d}"]
    assert (again.min_offset(), again.max_offset()) == (8, 11)
    assert again.read_units(0, 5) == []  # before the first file
    assert again.read_units(7, 5) == []
    assert again.read_units(8, 5) == units(8, 3)
    again.close()
    empty = fresh(tmp_path, qid=1)
    empty.reserve(12, 1)  # a file with no unit in it yet
    empty.close()
    assert fresh(tmp_path, qid=1).max_offset() == 12


def test_reserve_writes_no_units(tmp_path: Path) -> None:
    cq = fresh(tmp_path)
    cq.reserve(0, 3)
    assert cq.reserved_upto >= 3
    assert files(tmp_path) == [f"{0:020d}"]
    assert (cq.max_offset(), cq.read_units(0, 4)) == (0, [])
    cq.close()


# -- truncate_beyond -----------------------------------------------------------


def test_truncate_beyond_drops_units_that_end_past_the_log(tmp_path: Path) -> None:
    cq = fresh(tmp_path)
    cq.put_units(0, units(0, 10))  # unit k covers [100k, 100k + 100)
    # Unit 3 starts before 350 but ends after it: it goes too.
    cq.truncate_beyond(350)
    assert cq.max_offset() == 3
    assert cq.read_units(0, 10) == units(0, 3)
    assert files(tmp_path) == [f"{0:020d}"]
    raw = (qdir(tmp_path) / f"{0:020d}").read_bytes()
    assert raw[3 * UNIT_SIZE :] == bytes(UNIT_SIZE)
    cq.close()
    again = fresh(tmp_path)
    assert again.max_offset() == 3
    again.close()


def test_truncate_beyond_at_a_file_boundary_then_append(tmp_path: Path) -> None:
    cq = fresh(tmp_path)
    cq.put_units(0, units(0, 10))
    cq.truncate_beyond(400)  # units 0..3 end by 400: exactly the first file
    assert cq.max_offset() == 4
    assert files(tmp_path) == [f"{b:020d}" for b in (0, 80)]
    assert (qdir(tmp_path) / f"{80:020d}").read_bytes() == bytes(PER * UNIT_SIZE)
    assert cq.read_units(3, 5) == units(3, 1)
    # Appending resumes at the cut.
    cq.reserve(4, 2)
    cq.put_units(4, [(400, 50, 1), (450, 50, 2)])
    assert cq.read_units(3, 5) == units(3, 1) + [(400, 50, 1), (450, 50, 2)]
    assert cq.max_offset() == 6
    cq.close()
    again = fresh(tmp_path)
    assert again.max_offset() == 6
    assert again.read_units(0, 10) == units(0, 4) + [(400, 50, 1), (450, 50, 2)]
    again.close()


def test_truncate_beyond_edges(tmp_path: Path) -> None:
    cq = fresh(tmp_path)
    cq.put_units(0, units(0, 6))
    cq.truncate_beyond(10_000)  # nothing is past the log
    assert cq.read_units(0, 10) == units(0, 6) and cq.max_offset() == 6
    cq.truncate_beyond(600)  # the last unit ends exactly at the log's end
    assert cq.max_offset() == 6
    cq.truncate_beyond(0)
    assert cq.max_offset() == 0 and cq.read_units(0, 10) == []
    cq.close()
    assert fresh(tmp_path).max_offset() == 0


# -- damage the queue can see ---------------------------------------------------


def test_a_file_cut_mid_unit_loses_that_unit(tmp_path: Path) -> None:
    cq = fresh(tmp_path)
    cq.put_units(0, units(0, 3))
    cq.close()
    path = qdir(tmp_path) / f"{0:020d}"
    os.truncate(path, 2 * UNIT_SIZE + 5)  # into the third unit's log offset
    again = fresh(tmp_path)
    assert not again.files_whole()
    assert again.max_offset() == 2
    assert again.read_units(0, 10) == units(0, 2)
    again.close()


def test_files_whole_sees_short_and_missing_files(tmp_path: Path) -> None:
    cq = fresh(tmp_path)
    assert cq.files_whole()  # no files at all
    cq.put_units(0, units(0, 12))
    assert cq.files_whole()
    cq.close()
    os.unlink(qdir(tmp_path) / f"{80:020d}")
    assert not fresh(tmp_path).files_whole()  # a gap in the middle
    os.unlink(qdir(tmp_path) / f"{0:020d}")
    assert fresh(tmp_path).files_whole()  # a queue that starts later is whole
    os.truncate(qdir(tmp_path) / f"{160:020d}", 79)
    assert not fresh(tmp_path).files_whole()


def test_clear_deletes_every_unit(tmp_path: Path) -> None:
    cq = fresh(tmp_path)
    cq.put_units(0, units(0, 9))
    cq.flush()
    cq.clear()
    assert os.listdir(qdir(tmp_path)) == []
    assert (cq.max_offset(), cq.min_offset(), cq.flushed_offset) == (0, 0, 0)
    assert cq.read_units(0, 10) == []
    cq.put_units(0, units(50, 2))
    assert cq.read_units(0, 10) == units(50, 2)
    cq.close()


# -- the table -------------------------------------------------------------------


def test_table_opens_lists_and_drops_queues(tmp_path: Path) -> None:
    table = ConsumeQueueTable(tmp_path, PER)
    assert table.on_disk() == []
    a = table.get("A", 1)
    assert table.get("A", 1) is a and table.get("A", 0) is not a
    a.put_units(0, units(0, 2))
    table.get("B", 3).put_units(0, units(0, 5))
    table.get("A", 0).put_units(0, units(0, 1))
    (tmp_path / "consumequeue" / "B" / "tmp").mkdir()  # not a queue id
    assert table.on_disk() == [("A", 0), ("A", 1), ("B", 3)]
    table.flush()
    assert table.get("B", 3).flushed_offset == 5
    table.drop("A")
    assert not (tmp_path / "consumequeue" / "A").exists()
    assert ("A", 1) not in table.queues and ("B", 3) in table.queues
    table.close()
    assert table.queues == {}
    other = ConsumeQueueTable(tmp_path, PER)
    assert other.get("B", 3).read_units(0, 10) == units(0, 5)
    assert other.get("A", 1).max_offset() == 0
    other.forget()
    assert other.queues == {}


@pytest.mark.parametrize("byte", [0, 7, 8, 9, 11, 12, 19])
def test_a_unit_that_fails_its_check_reads_as_damaged(
    tmp_path: Path, byte: int
) -> None:
    """Any flipped bit of a unit (offset, size, tag code or the check) makes
    it read as damaged (``DAMAGED_UNIT_SIZE``: its readers rebuild it from
    the log), never as another unit; a unit without a check (written before
    units had one) is taken as it is."""
    cq = fresh(tmp_path)
    cq.put_units(0, units(0, 3))
    cq.close()
    path = qdir(tmp_path) / f"{0:020d}"
    raw = bytearray(path.read_bytes())
    raw[20 + byte] ^= 0x04
    path.write_bytes(bytes(raw))
    cq = fresh(tmp_path)
    got = cq.read_units(0, 3)
    assert got[0] == units(0, 1)[0] and got[2] == units(2, 1)[0]
    assert got[1][1] == DAMAGED_UNIT_SIZE
    cq.close()
    raw[20:40] = struct.pack(">qiq", 100, 100, 1001)  # no check byte
    path.write_bytes(bytes(raw))
    cq = fresh(tmp_path)
    assert cq.read_units(0, 3) == units(0, 3)
    cq.close()
