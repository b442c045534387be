"""Timer messages: never early, days ahead, restarts, clock jumps, stats, recall."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from broker_core import Broker, Message
from broker_core.errors import RecallError
from broker_core.schedule import DelayService
from tests.broker_core.schedule.conftest import STORE

DAY = 86_400_000


def _now() -> int:
    return int(time.time() * 1000)


def test_timer_on_real_clock_never_early(
    broker: Broker, svc: DelayService, drain: Any
) -> None:
    due = _now() + 300
    svc.send_delayed(Message("Orders", b"a"), deliver_at_ms=due)
    svc.send_delayed(Message("Orders", b"b"), delay_ms=150)
    svc.deliver_due(budget_s=0.6)
    got = drain(broker, "Orders")
    assert sorted(m.body for m in got) == [b"a", b"b"]
    for m in got:
        assert m.store_timestamp >= int(m.properties["TIMER_OUT_MS"])
        assert "REAL_TOPIC" not in m.properties and "TIMER_DELAY_MS" not in m.properties


def test_timers_days_ahead_survive_restart(store_dir: Path, drain: Any) -> None:
    base = _now()
    with Broker.open(store_dir, **STORE) as b:
        s = DelayService(b)
        for days in (1, 2, 3):  # 3 days: RocketMQ's timerMaxDelaySec, the cap
            s.send_delayed(Message("Orders", f"d{days}".encode()), delay_ms=days * DAY)
        assert s.deliver_due(now_ms=base + DAY - 1000).delivered == 0
        st = s.stats(now_ms=base)
        assert (st.timers.pending, st.timers.due_next_day, st.timers.due_later) == (
            3,
            0,
            3,
        )
        s.close()
    with Broker.open(store_dir, **STORE) as b:
        s = DelayService(b)
        assert s.stats(now_ms=base).timers.pending == 3
        assert s.deliver_due(now_ms=base + DAY + 5000).delivered == 1
        s.close()
    with Broker.open(store_dir, **STORE) as b:
        s = DelayService(b)
        assert s.deliver_due(now_ms=base + 2 * DAY + 5000).delivered == 1
        assert s.deliver_due(now_ms=base + 3 * DAY + 5000).delivered == 1
        assert s.deliver_due(now_ms=base + 31 * DAY).delivered == 0
        s.close()
        assert sorted(m.body for m in drain(b, "Orders")) == [b"d1", b"d2", b"d3"]


def test_clock_jumps_forward_and_back(
    broker: Broker, svc: DelayService, drain: Any
) -> None:
    t = _now()
    for i in (1, 2, 3):
        svc.send_delayed(
            Message("Orders", f"t{i}".encode()), deliver_at_ms=t + i * 10_000
        )
    r = broker.send(Message("Orders", b"lvl", properties={"DELAY": "4"}))  # 10 s
    stored = broker.get_message(r.offset_msg_id).store_timestamp
    # Forward: everything due by then is delivered once.
    assert svc.deliver_due(now_ms=t + 25_000).delivered == 3  # t1, t2, lvl
    # Back: nothing is delivered again, nothing early.
    assert svc.deliver_due(now_ms=t - 3_600_000).delivered == 0
    assert svc.deliver_due(now_ms=t + 29_999).delivered == 0
    assert svc.deliver_due(now_ms=t + 30_000).delivered == 1
    assert svc.deliver_due(now_ms=t + 60_000).delivered == 0
    bodies = sorted(m.body for m in drain(broker, "Orders"))
    assert bodies == [b"lvl", b"t1", b"t2", b"t3"]
    # A level message stored before the clock went back waits one delay, not the jump.
    r2 = broker.send(Message("Orders", b"lvl2", properties={"DELAY": "1"}))
    s2 = broker.get_message(r2.offset_msg_id).store_timestamp
    back = s2 - 3_600_000
    assert svc.deliver_due(now_ms=back).delivered == 0
    assert svc.deliver_due(now_ms=back + 999).delivered == 0
    assert svc.deliver_due(now_ms=back + 1000).delivered == 1
    assert stored > 0


def test_recall_level_and_timer(broker: Broker, svc: DelayService, drain: Any) -> None:
    lv = broker.send(Message("Orders", b"lvl", properties={"DELAY": "3"}))
    keep = broker.send(Message("Orders", b"keep", properties={"DELAY": "3"}))
    tm = svc.send_delayed(Message("Orders", b"tm"), delay_ms=60_000)
    listed = {m.msg_id for m in svc.list_scheduled()}
    assert {lv.msg_id, keep.msg_id, tm.msg_id} <= listed
    r1 = svc.recall(lv.msg_id)
    assert r1.level == 3 and r1.real_topic == "Orders"
    r2 = svc.recall(tm.offset_msg_id)
    assert r2.kind.value == "timer"
    with pytest.raises(RecallError, match="already"):
        svc.recall(lv.msg_id)
    with pytest.raises(RecallError, match="already"):
        svc.recall(tm.msg_id)
    with pytest.raises(RecallError, match="no scheduled"):
        svc.recall("0123456789ABCDEF0123456789ABCDEF")
    assert {m.msg_id for m in svc.list_scheduled()} == {keep.msg_id}
    # A recall made by another service instance (another process) is honoured.
    other = DelayService(broker)
    assert other.deliver_due(now_ms=_now() + 120_000).delivered == 1
    assert [m.body for m in drain(broker, "Orders")] == [b"keep"]
    with pytest.raises(RecallError, match="delivered"):
        svc.recall(keep.msg_id)
    assert svc.deliver_due(now_ms=_now() + 200_000).delivered == 0
    other.close()


def test_stats_for_the_console(broker: Broker, svc: DelayService) -> None:
    now = _now()
    for delay in (30_000, 30 * 60_000, 5 * 3_600_000, 2 * DAY):
        svc.send_delayed(Message("Orders", b"x"), delay_ms=delay)
    for _ in range(3):
        broker.send(Message("Orders", b"y", properties={"DELAY": "2"}))
    st = svc.stats(now_ms=now)
    t = st.timers
    assert (
        t.pending,
        t.due_next_minute,
        t.due_next_hour,
        t.due_next_day,
        t.due_later,
    ) == (
        4,
        1,
        1,
        1,
        1,
    )
    lv2 = st.levels[1]
    assert (
        lv2.backlog == 3 and lv2.next_due_ms is not None and lv2.oldest_overdue_ms == 0
    )
    late = svc.stats(now_ms=now + 10_000)
    assert late.levels[1].oldest_overdue_ms > 7000
    svc.deliver_due(now_ms=now + 10_000)
    after = svc.stats(now_ms=now + 10_000)
    assert after.levels[1].backlog == 0
    assert sum(after.delivered_per_minute.values()) == 3
