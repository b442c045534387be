"""The range decoder against broker_core's own decoder (no Spark)."""

from __future__ import annotations

import pytest

from broker_core import Broker, Message
from broker_core.record import decode_buffer
from console.reports.jobs import scan


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    path = tmp_path_factory.mktemp("scanstore")
    with Broker.open(str(path), segment_size=32 * 1024) as broker:
        for i in range(600):
            broker.send(
                Message(
                    f"T{i % 3}",
                    b"b" * (1 + i % 50),
                    tags=f"t{i % 4}" if i % 5 else None,
                    keys=f"k{i} x{i % 2}",
                    properties={"P": str(i)},
                )
            )
    return path


def _expected(path):
    rows = []
    for seg in scan.segment_files(path):
        data = seg.read_bytes()
        for m in decode_buffer(memoryview(data), int(seg.name)):
            rows.append((m.topic, m.commit_log_offset, len(m.body), m.tags, m.keys))
    return rows


@pytest.mark.parametrize("range_bytes", [1000, 4096, 7777, 1 << 20])
def test_ranges_decode_every_record_once(store, range_bytes):
    ranges = scan.split_ranges(store, range_bytes)
    assert len(scan.segment_files(store)) > 1
    table = scan.decode_ranges(ranges)
    got = list(
        zip(
            table["topic"].to_pylist(),
            table["physical_offset"].to_pylist(),
            table["body_size"].to_pylist(),
            table["tags"].to_pylist(),
            table["keys"].to_pylist(),
            strict=True,
        )
    )
    assert got == _expected(store)
    assert table.num_rows == 600
    # User properties survive; ids and the CRC do not bloat the column.
    props = dict(table["properties"][0].as_py())
    assert props == {"P": "0"}


def test_split_stops_at_commit_position(store):
    end = scan.commit_position(store)
    assert end is not None
    ranges = scan.split_ranges(store, 4096)
    assert max(r.base + r.end for r in ranges) == end
    half = scan.split_ranges(store, 4096, end_offset=end // 2)
    first = scan.decode_ranges(half)["physical_offset"].to_pylist()
    assert first and all(off < end // 2 for off in first)
    rest = scan.decode_ranges(scan.split_ranges(store, 4096, start_offset=end // 2))
    assert len(first) + rest.num_rows == 600
