"""The replica append: the master's bytes are checked whole before any is
visible, at exactly the master's offsets, across segment boundaries."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from _hahelpers import SETTINGS, log_bytes, queue_units

from broker_core import Broker, Message
from broker_core.errors import ReplicationError
from broker_core.ha.master import chunk_extent
from broker_core.schedule import DelayService


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[tuple[Broker, Broker]]:
    m = Broker.open(tmp_path / "m", **SETTINGS)
    s = Broker.open(tmp_path / "s", **SETTINGS)
    yield m, s
    s.close()
    m.close()


def _chunks(m: Broker, start: int, max_bytes: int) -> Iterator[tuple[int, bytes]]:
    """Yield the chunks the master's sender would send from ``start``."""
    store = m.store
    end = store.max_physical_offset()
    pos = start
    while pos < end:
        seg = store.commitlog.segments.segment(pos)
        a = pos - seg.base
        n, blank = chunk_extent(seg.view, a, min(seg.size, end - seg.base), max_bytes)
        yield pos, bytes(seg.view[a : a + n])
        pos = seg.base + seg.size if blank else pos + n


def test_chunks_across_segments_rebuild_identical_queues(
    pair: tuple[Broker, Broker],
) -> None:
    m, s = pair
    DelayService(m).close()  # its send hook stays: DELAY parks in the schedule topic
    for i in range(0, 1200, 40):
        m.send_batch(
            [
                Message(
                    "Q", b"x" * (i % 700) + b"%d" % j, keys=f"k{j}", tags=f"t{j % 5}"
                )
                for j in range(i, i + 40)
            ]
            + [Message("Q", b"later", properties={"DELAY": str(1 + i % 3)})]
        )
    end = m.store.max_physical_offset()
    assert end > 3 * SETTINGS["segment_size"]
    for start, data in _chunks(m, 0, 10_000):
        assert s.store.replica_append(start, data) == s.store.max_physical_offset()
    assert s.store.max_physical_offset() == end
    seg = SETTINGS["segment_size"]
    assert log_bytes(s.store.root, end, seg) == log_bytes(m.store.root, end, seg)
    units = queue_units(m.store.root)
    assert queue_units(s.store.root) == units
    # Tag codes and the schedule queue's due times came out the same.
    assert len({code for _o, _s, code in units[("Q", 1)]}) >= 5
    assert units[("SCHEDULE_TOPIC_XXXX", 1)]
    got = s.pull("g", "Q", 2, 0, 5).messages
    assert [x.body for x in got] == [x.body for x in m.pull("g", "Q", 2, 0, 5).messages]


def test_a_damaged_or_misplaced_chunk_is_refused_whole(
    pair: tuple[Broker, Broker],
) -> None:
    m, s = pair
    m.send_batch([Message("Q", b"body-%d" % i) for i in range(50)])
    (start, data), *_ = _chunks(m, 0, 1 << 20)
    bad = bytearray(data)
    bad[len(bad) // 2] ^= 0x55  # one flipped byte in a record past the first
    with pytest.raises(ReplicationError):
        s.store.replica_append(start, bytes(bad))
    with pytest.raises(ReplicationError):
        s.store.replica_append(start, data[: len(data) - 5])  # a torn record
    with pytest.raises(ReplicationError, match="does not continue"):
        first = int.from_bytes(data[:4], "big")
        s.store.replica_append(first, data[first:])
    # Nothing of them is visible: no log, no queue unit.
    assert s.store.max_physical_offset() == 0
    assert s.store.state.commit_pos == 0
    assert all(not u for u in queue_units(s.store.root).values())
    assert s.store.replica_append(start, data) == m.store.max_physical_offset()
