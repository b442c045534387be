"""A consume-queue unit that points at nothing readable is never served.

A flipped log position in a unit used to make a phantom message out of the
middle of another record (the facade's ``pull`` returned an object whose
fields raised ``struct.error``; through ``serve`` the official consumer got
an empty message with id 000...0) whenever the record lay past the trusted
position, i.e. was written since the store opened.

Now the damaged unit is also rebuilt from the log while the store is open
(``MessageStore.repair_units``: the records between its good neighbours), so
the message it named is delivered after all; a run of zeroed units likewise.
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
        # Never a phantom; and the unit, rebuilt from the log, serves message-3.
        assert bodies == [b"message-%d" % i for i in range(10)]
        assert all(m.commit_log_offset >= 0 and m.msg_id for m in got.messages)
        assert got.next_offset == 10
        (fixed,) = struct.unpack_from(">q", cq.read_bytes(), 3 * 20)
        assert fixed == phys
        # The one-at-a-time path (a filter) likewise.
        tagged = b.pull(
            "G", "Q", 0, 0, 32, expression="a IS NULL", expression_type="SQL92"
        )
        assert [m.body for m in tagged.messages] == bodies


def test_a_zeroed_run_of_units_is_rebuilt_while_open(tmp_path: Path) -> None:
    """4 KiB of a queue file zeroed under an open store (units 5..209 of 300):
    pull, the one-at-a-time path and the endpoint's unit reads all get every
    message once, and the units are the log's again."""
    with Broker.open(tmp_path, segment_size=1 << 20, cq_units_per_file=512) as b:
        for i in range(300):
            b.send(Message("Z", b"z-%03d" % i, queue_id=0, tags="t"))
        cq = tmp_path / "consumequeue" / "Z" / "0" / f"{0:020d}"
        before = cq.read_bytes()
        with open(cq, "r+b") as fh:
            fh.seek(5 * 20)
            fh.write(bytes(4096))
        got: list[bytes] = []
        off = 0
        while off < 300:
            r = b.pull("G", "Z", 0, off, 32)
            got += [m.body for m in r.messages]
            off = r.next_offset
        assert got == [b"z-%03d" % i for i in range(300)]
        assert cq.read_bytes()[: 300 * 20] == before[: 300 * 20]
        units = b.store.get_queue_units("Z", 0, 0, 300)
        assert [u[1] > 1 for u in units] == [True] * 300


@pytest.mark.parametrize("source", ["same queue", "other queue"])
def test_a_unit_naming_another_whole_record_is_rebuilt(
    tmp_path: Path, source: str
) -> None:
    """Unit 3 overwritten with a unit naming another whole record (unit 5 of
    its queue, or unit 3 of another queue): the record there starts with the
    unit's size and offset, so only its queue id and queue offset tell. It
    was served twice and message-3 never; now the unit is rebuilt from the
    log and every message comes once, on every read path and after a reopen."""
    with Broker.open(tmp_path, **SETTINGS) as b:
        for i in range(10):
            b.send(Message("Q", b"message-%d" % i, queue_id=0))
            b.send(Message("Q", b"other-%d" % i, queue_id=1))
        q0 = tmp_path / "consumequeue" / "Q" / "0" / f"{0:020d}"
        data = bytearray(q0.read_bytes())
        if source == "same queue":
            data[3 * 20 : 4 * 20] = data[5 * 20 : 6 * 20]
        else:
            q1 = (tmp_path / "consumequeue" / "Q" / "1" / f"{0:020d}").read_bytes()
            data[3 * 20 : 4 * 20] = q1[3 * 20 : 4 * 20]
        with open(q0, "r+b") as fh:
            fh.write(bytes(data))
        want = [b"message-%d" % i for i in range(10)]
        got = b.pull("G", "Q", 0, 0, 32)
        assert [m.body for m in got.messages] == want
        assert [m.queue_offset for m in got.messages] == list(range(10))
        tagged = b.pull(
            "G", "Q", 0, 0, 32, expression="a IS NULL", expression_type="SQL92"
        )
        assert [m.body for m in tagged.messages] == want
    with Broker.open(tmp_path, **SETTINGS) as b:
        assert [m.body for m in b.pull("G", "Q", 0, 0, 32).messages] == want


@pytest.mark.parametrize("abnormal", [False, True])
def test_a_zeroed_queue_tail_is_rebuilt_at_open(tmp_path: Path, abnormal: bool) -> None:
    """The last units of a queue zeroed while the store was closed: the open
    rebuilds the queue from the log, so the next sends take new queue offsets
    (they took those of the five intact messages, which no consumer could
    read again, and verify said OK)."""
    from broker_core.verify import verify_store

    with Broker.open(tmp_path, **SETTINGS) as b:
        for i in range(40):
            b.send(Message("Q", b"old-%02d" % i, queue_id=0))
    cq = tmp_path / "consumequeue" / "Q" / "0" / f"{0:020d}"
    data = bytearray(cq.read_bytes())
    data[35 * 20 : 40 * 20] = bytes(5 * 20)  # units 35..39
    cq.write_bytes(data)
    if abnormal:
        (tmp_path / "abort").touch()
    with Broker.open(tmp_path, **SETTINGS) as b:
        sent = [b.send(Message("Q", b"new-%02d" % i, queue_id=0)) for i in range(5)]
        assert [r.queue_offset for r in sent] == [40, 41, 42, 43, 44]
        got = b.pull("G", "Q", 0, 0, 64)
        assert [m.body for m in got.messages] == [
            b"old-%02d" % i for i in range(40)
        ] + [b"new-%02d" % i for i in range(5)]
    assert verify_store(tmp_path).ok


def test_a_flipped_tag_code_is_caught_by_the_unit_s_check(tmp_path: Path) -> None:
    """One bit of a unit's tag code flipped: the unit fails its check, the
    store rebuilds it from the log, and the tag's subscriber gets the message
    (it was skipped as another tag's until ``verify --repair``)."""
    with Broker.open(tmp_path, **SETTINGS) as b:
        for i in range(10):
            b.send(Message("Q", b"m-%d" % i, queue_id=0, tags="paid"))
    cq = tmp_path / "consumequeue" / "Q" / "0" / f"{0:020d}"
    data = bytearray(cq.read_bytes())
    data[4 * 20 + 12 + 7] ^= 0x01  # unit 4: the tag code's low bit
    cq.write_bytes(bytes(data))
    with Broker.open(tmp_path, **SETTINGS) as b:
        got = b.pull("G", "Q", 0, 0, 32, expression="paid")
        assert [m.body for m in got.messages] == [b"m-%d" % i for i in range(10)]
        assert b.pull("H", "Q", 0, 0, 32, expression="open").messages == []
    from broker_core.verify import verify_store

    assert verify_store(tmp_path).ok
