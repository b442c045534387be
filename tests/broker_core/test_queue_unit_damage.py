"""A consume-queue unit that points at nothing readable is never served.

A flipped log position in a unit used to make a phantom message out of the
middle of another record (the facade's ``pull`` returned an object whose
fields raised ``struct.error``; through ``serve`` the official consumer got
an empty message with id 000...0) whenever the record lay past the trusted
position, i.e. was written since the store opened.
"""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from broker_core import Broker, Message

SETTINGS = {"segment_size": 64 * 1024, "cq_units_per_file": 64}


@pytest.mark.parametrize("delta", [8, 1, -4, 1 << 20])
def test_a_unit_pointing_into_another_record_is_stepped_over(
    tmp_path: Path, delta: int
) -> None:
    with Broker.open(tmp_path, **SETTINGS) as b:
        for i in range(10):
            b.send(Message("Q", b"message-%d" % i, queue_id=0))
        cq = tmp_path / "consumequeue" / "Q" / "0" / f"{0:020d}"
        data = bytearray(cq.read_bytes())
        (phys,) = struct.unpack_from(">q", data, 3 * 20)
        struct.pack_into(">q", data, 3 * 20, phys + delta)  # unit 3: log position
        with open(cq, "r+b") as fh:  # in place: the open store's mapping sees it
            fh.write(bytes(data))
        got = b.pull("G", "Q", 0, 0, 32)
        bodies = [m.body for m in got.messages]  # every field decodes
        assert bodies == [b"message-%d" % i for i in range(10) if i != 3]
        assert all(m.commit_log_offset >= 0 and m.msg_id for m in got.messages)
        assert got.next_offset == 10
        # The one-at-a-time path (a filter) likewise.
        tagged = b.pull(
            "G", "Q", 0, 0, 32, expression="a IS NULL", expression_type="SQL92"
        )
        assert [m.body for m in tagged.messages] == bodies
