"""A store opens with the file sizes it was created with.

A store created with 256 KiB segments and opened without a segment size (the
1 GiB default) used to treat its segments as one huge file: recovery declared
intact records lost and later sends overwrote acknowledged ones. The store's
own ``config/store.json`` (or, missing that, its files) now wins over a
caller's default, and an explicit conflicting size is refused.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from broker_core import Broker, Message
from broker_core.errors import ValidationError

SMALL = {"segment_size": 256 * 1024, "cq_units_per_file": 1000}


def _read_all(path: Path, topic: str) -> list[bytes]:
    out: list[bytes] = []
    with Broker.open(path) as b:
        for qid in range(b.store.topics.topics[topic].read_queue_nums):
            offset = 0
            while True:
                res = b.pull("G", topic, qid, offset, 500)
                if not res.messages:
                    break
                out.extend(m.body for m in res.messages)
                offset = res.next_offset
    return out


def _send(b: Broker, start: int, count: int) -> None:
    for i in range(start, start + count):
        b.send(Message("Geo", f"m-{i:05d}-".encode() * 50))


@pytest.mark.parametrize("lose_config", [False, True])
def test_default_open_keeps_every_record(tmp_path: Path, lose_config: bool) -> None:
    with Broker.open(tmp_path, **SMALL) as b:
        _send(b, 0, 1500)
        assert b.store.commitlog.last_segment_base() >= 2 * SMALL["segment_size"]
    if lose_config:  # the files alone must tell the sizes
        (tmp_path / "config" / "store.json").unlink()
    with Broker.open(tmp_path) as b:  # no sizes given: the store's own win
        assert b.store.config.segment_size == SMALL["segment_size"]
        assert b.store.config.cq_units_per_file == SMALL["cq_units_per_file"]
        assert b.store.recovery_info is not None
        assert not b.store.quarantine.ranges
        _send(b, 1500, 50)
    with Broker.open(tmp_path, **SMALL) as b:
        assert not b.store.quarantine.ranges
    bodies = _read_all(tmp_path, "Geo")
    assert sorted(bodies) == sorted(f"m-{i:05d}-".encode() * 50 for i in range(1550))


def test_conflicting_explicit_size_is_refused(tmp_path: Path) -> None:
    with Broker.open(tmp_path, **SMALL) as b:
        _send(b, 0, 10)
    with pytest.raises(ValidationError, match="created with segment_size=262144"):
        Broker.open(tmp_path, segment_size=512 * 1024)
    assert len(_read_all(tmp_path, "Geo")) == 10


def test_a_damaged_store_json_does_not_move_the_records(tmp_path: Path) -> None:
    """One digit of ``segment_size`` changed in ``config/store.json`` (valid
    JSON, no checksum): the segment files' names say the size they were
    written with, and they win (an open lost 91% of the messages for good);
    ``verify`` names the conflict and ``verify --repair`` writes it back."""
    import json

    from broker_core.verify import repair_store, verify_store

    store = tmp_path / "s"
    with Broker.open(store, segment_size=64 * 1024) as b:
        _send(b, 0, 1500)
    assert len(list((store / "commitlog").iterdir())) >= 3
    path = store / "config" / "store.json"
    saved = json.loads(path.read_text())
    path.write_text(json.dumps({**saved, "segment_size": 65526}))
    report = verify_store(store)
    assert any("65526" in p and "65536" in p for p in report.problems), report.problems
    assert len(_read_all(store, "Geo")) == 1500
    with Broker.open(store) as b:
        _send(b, 1500, 10)
    assert len(_read_all(store, "Geo")) == 1510
    repair_store(store)
    assert json.loads(path.read_text())["segment_size"] == 64 * 1024
    assert verify_store(store).ok
