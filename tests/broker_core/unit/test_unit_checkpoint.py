"""The checkpoint file and the abort marker on their own."""

from __future__ import annotations

import logging
import os
import struct
import zlib
from pathlib import Path

import pytest

from broker_core.checkpoint import (
    CHECKPOINT,
    CHECKPOINT_SIZE,
    Checkpoint,
    abort_exists,
    create_abort,
    read_checkpoint,
    remove_abort,
    write_checkpoint,
)

CP = Checkpoint(
    physic_timestamp=1_700_000_000_001,
    logics_timestamp=1_700_000_000_002,
    index_timestamp=1_700_000_000_003,
    flushed_offset=123_456_789,
    confirm_offset=123_456_000,
    logics_offset=120_000_000,
    index_offset=110_000_000,
)
FIELDS = (
    "physic_timestamp",
    "logics_timestamp",
    "index_timestamp",
    "flushed_offset",
    "confirm_offset",
    "logics_offset",
    "index_offset",
)


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "checkpoint"


def test_missing_file_reads_as_zeros(path: Path) -> None:
    assert read_checkpoint(path) == Checkpoint()
    assert Checkpoint() == Checkpoint(0, 0, 0, 0, 0, 0, 0)


def test_round_trip_and_layout(path: Path) -> None:
    write_checkpoint(path, CP)
    assert read_checkpoint(path) == CP
    raw = path.read_bytes()
    assert len(raw) == CHECKPOINT_SIZE == 4096
    # Big-endian longs in RocketMQ's order, then this store's, then the CRC.
    values = struct.unpack_from(">7q", raw, 0)
    assert values == tuple(getattr(CP, f) for f in FIELDS)
    assert struct.unpack_from(">I", raw, 56)[0] == zlib.crc32(raw[:56])
    assert raw[60:] == bytes(CHECKPOINT_SIZE - 60)


def test_rewritten_in_place(path: Path) -> None:
    write_checkpoint(path, CP)
    smaller = Checkpoint(1, 2, 3, 4, 5, 6, 7)
    write_checkpoint(path, smaller)
    assert read_checkpoint(path) == smaller
    assert path.stat().st_size == CHECKPOINT_SIZE


@pytest.mark.parametrize("length", [0, 1, 8, 55, 56, 59])
def test_a_short_file_reads_as_zeros(
    path: Path, length: int, caplog: pytest.LogCaptureFixture
) -> None:
    write_checkpoint(path, CP)
    os.truncate(path, length)
    with caplog.at_level(logging.WARNING, logger="broker_core.checkpoint"):
        assert read_checkpoint(path) == Checkpoint()
    assert "short" in caplog.text


def test_the_first_60_bytes_are_enough(path: Path) -> None:
    write_checkpoint(path, CP)
    os.truncate(path, 60)  # the fields and the CRC: nothing is missing
    assert read_checkpoint(path) == CP


@pytest.mark.parametrize("at", [0, 7, 24, 31, 47, 55, 56, 59])
def test_a_flipped_byte_reads_as_zeros(
    path: Path, at: int, caplog: pytest.LogCaptureFixture
) -> None:
    write_checkpoint(path, CP)
    raw = bytearray(path.read_bytes())
    raw[at] ^= 0x01
    path.write_bytes(bytes(raw))
    with caplog.at_level(logging.WARNING, logger="broker_core.checkpoint"):
        assert read_checkpoint(path) == Checkpoint()
    assert "damaged" in caplog.text


def test_bytes_past_the_crc_are_not_checked(path: Path) -> None:
    write_checkpoint(path, CP)
    raw = bytearray(path.read_bytes())
    raw[100] = 0xAA
    raw[4095] = 0x55
    path.write_bytes(bytes(raw))
    assert read_checkpoint(path) == CP


def test_a_torn_write_reads_as_zeros(path: Path) -> None:
    """New fields in the first half, the old ones (and old CRC) in the rest."""
    write_checkpoint(path, CP)
    old = path.read_bytes()
    newer = Checkpoint(*(getattr(CP, f) + 1000 for f in FIELDS))
    write_checkpoint(path, newer)
    new = path.read_bytes()
    assert read_checkpoint(path) == newer
    path.write_bytes(new[:32] + old[32:])
    assert read_checkpoint(path) == Checkpoint()
    path.write_bytes(old[:32] + new[32:])
    assert read_checkpoint(path) == Checkpoint()


def test_a_file_from_before_the_crc_is_read_unchecked(path: Path) -> None:
    fields = tuple(getattr(CP, f) for f in FIELDS)
    path.write_bytes(CHECKPOINT.pack(*fields) + bytes(4))  # CRC field 0
    assert read_checkpoint(path) == CP


@pytest.mark.parametrize("field", ["flushed_offset", "logics_offset", "index_offset"])
def test_a_negative_offset_reads_as_zeros(path: Path, field: str) -> None:
    bad = Checkpoint(**{f: getattr(CP, f) for f in FIELDS})
    setattr(bad, field, -1)
    write_checkpoint(path, bad)  # a valid CRC over a value that cannot be
    assert read_checkpoint(path) == Checkpoint()


def test_abort_marker(tmp_path: Path) -> None:
    assert not abort_exists(tmp_path)
    assert create_abort(tmp_path)
    assert abort_exists(tmp_path)
    assert (tmp_path / "abort").read_text() == str(os.getpid())
    assert create_abort(tmp_path)  # again: truncated and rewritten
    assert (tmp_path / "abort").read_text() == str(os.getpid())
    remove_abort(tmp_path)
    assert not abort_exists(tmp_path)
    remove_abort(tmp_path)  # removing it twice is fine
    assert not abort_exists(tmp_path)


def test_abort_marker_that_cannot_be_written_returns_false(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-dir"
    assert create_abort(missing) is False
    assert not abort_exists(missing)
