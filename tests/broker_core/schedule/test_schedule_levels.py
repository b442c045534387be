"""Delay levels: every level's delay, clamping, progress persistence and correction."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from broker_core import Broker, Message
from broker_core.schedule import DelayService, install_send_hook
from tests.broker_core.schedule.conftest import LEVELS_MS, STORE


def _send_levels(broker: Broker) -> dict[int, int]:
    """Send one message per level; return level -> due time (store time + delay)."""
    due = {}
    for level in range(1, len(LEVELS_MS) + 1):
        r = broker.send(
            Message(
                "Orders",
                f"L{level}".encode(),
                tags="t",
                properties={"DELAY": str(level)},
            )
        )
        stored = broker.get_message(r.offset_msg_id).store_timestamp
        due[level] = stored + LEVELS_MS[level - 1]
    return due


def test_every_level_delivered_exactly_at_its_delay(
    broker: Broker, svc: DelayService, drain: Any
) -> None:
    due = _send_levels(broker)
    for level in sorted(due, key=due.get):
        assert (
            svc.deliver_due(now_ms=due[level] - 1).levels_delivered == 0 or level == 1
        )
        bodies = {m.body for m in drain(broker, "Orders")}
        assert f"L{level}".encode() not in bodies
        svc.deliver_due(now_ms=due[level])
        got = [m for m in drain(broker, "Orders") if m.body == f"L{level}".encode()]
        assert len(got) == 1
        m = got[0]
        assert "DELAY" not in m.properties
        assert m.properties["REAL_TOPIC"] == "Orders" and m.tags == "t"
        assert m.store_timestamp >= 0
    assert len(drain(broker, "Orders")) == len(LEVELS_MS)


def test_level_delivered_on_real_clock_not_early(
    broker: Broker, svc: DelayService, drain: Any
) -> None:
    r = broker.send(Message("Orders", b"one-second", properties={"DELAY": "1"}))
    sent = broker.get_message(r.offset_msg_id).store_timestamp
    svc.deliver_due(budget_s=1.3)
    got = drain(broker, "Orders")
    assert [m.body for m in got] == [b"one-second"]
    assert got[0].store_timestamp >= sent + 1000
    assert got[0].queue_id == int(got[0].properties["REAL_QID"])


def test_level_above_max_is_clamped(
    broker: Broker, svc: DelayService, drain: Any
) -> None:
    r = broker.send(Message("Orders", b"far", properties={"DELAY": "40"}))
    top = len(LEVELS_MS)
    assert r.queue_id == top - 1
    m = broker.get_message(r.offset_msg_id)
    assert m.properties["DELAY"] == str(top)
    svc.deliver_due(now_ms=m.store_timestamp + LEVELS_MS[-1] - 1)
    assert drain(broker, "Orders") == []
    svc.deliver_due(now_ms=m.store_timestamp + LEVELS_MS[-1])
    assert [x.body for x in drain(broker, "Orders")] == [b"far"]


def test_progress_persisted_atomically_and_survives_restart(
    store_dir: Path, drain: Any
) -> None:
    with Broker.open(store_dir, **STORE) as b:
        s = DelayService(b)
        for i in range(5):
            b.send(Message("Orders", f"m{i}".encode(), properties={"DELAY": "1"}))
        s.deliver_due(now_ms=int(time.time() * 1000) + 5000)
        s.close()
    data = json.loads((store_dir / "config" / "delayOffset.json").read_text())
    assert data["offsetTable"]["1"] == 5
    with Broker.open(store_dir, **STORE) as b:
        s = DelayService(b)
        b.send(Message("Orders", b"m5", properties={"DELAY": "1"}))
        s.deliver_due(now_ms=int(time.time() * 1000) + 5000)
        s.close()
        assert sorted(m.body for m in drain(b, "Orders")) == [
            f"m{i}".encode() for i in range(6)
        ]


@pytest.mark.parametrize(
    "stored", ['{"offsetTable":{1:999}}', '{"offsetTable":{"1":-7}}']
)
def test_offset_outside_queue_range_is_corrected(
    store_dir: Path, stored: str, drain: Any
) -> None:
    """RocketMQ #1869: an offset beyond the queue must not strand messages."""
    with Broker.open(store_dir, **STORE) as b:
        install_send_hook(b)
        for i in range(3):
            b.send(Message("Orders", f"m{i}".encode(), properties={"DELAY": "1"}))
    # fastjson's unquoted integer keys are accepted too.
    (store_dir / "config" / "delayOffset.json").write_text(stored)
    with Broker.open(store_dir, **STORE) as b:
        s = DelayService(b)
        s.deliver_due(now_ms=int(time.time() * 1000) + 5000)
        s.close()
        n = len(drain(b, "Orders"))
    # An offset past the end is clamped to the end (RocketMQ): nothing is redelivered;
    # one below the start is clamped to the start: everything is delivered.
    assert n == (0 if "999" in stored else 3)


def test_crash_between_put_and_persist_does_not_duplicate(
    store_dir: Path, drain: Any
) -> None:
    """Deliveries not yet in the progress file are found in the log (DELAY_SRC)."""
    with Broker.open(store_dir, **STORE) as b:
        s = DelayService(b, persist_interval_ms=10**9)
        for i in range(10):
            b.send(Message("Orders", f"m{i}".encode(), properties={"DELAY": "2"}))
        now = int(time.time() * 1000) + 3000
        assert s.deliver_due(now_ms=now).delivered == 10
        # Progress as of before the deliveries, as a killed process leaves it.
        (b.store.root / "config" / "delayOffset.json").unlink()
        s2 = DelayService(b)
        assert s2.deliver_due(now_ms=now + 1).delivered == 0
        for i in range(10, 13):
            b.send(Message("Orders", f"m{i}".encode(), properties={"DELAY": "2"}))
        assert s2.deliver_due(now_ms=now + 10_000).delivered == 3
        # The first service sees the second took over and does not redeliver.
        assert s.deliver_due(now_ms=now + 20_000).delivered == 0
        assert len(drain(b, "Orders")) == 13


def test_failed_delivery_retries_the_same_message(
    broker: Broker, svc: DelayService, drain: Any
) -> None:
    for i in range(4):
        broker.send(Message("Orders", f"m{i}".encode(), properties={"DELAY": "1"}))
    svc.send_delayed(Message("Orders", b"t0"), delay_ms=10)
    real_put = svc.put_batch
    calls = {"n": 0}

    def failing_once(msgs: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 1:
            raise OSError("disk full")
        return real_put(msgs)

    svc.put_batch = failing_once
    now = int(time.time() * 1000) + 5000
    first = svc.deliver_due(now_ms=now)
    assert first.failures == 1 and "disk full" in (first.last_error or "")
    assert drain(broker, "Orders") == []
    time.sleep(0.15)  # the back-off
    svc.deliver_due(now_ms=now)
    bodies = sorted(m.body for m in drain(broker, "Orders"))
    assert bodies == [b"m0", b"m1", b"m2", b"m3", b"t0"]
