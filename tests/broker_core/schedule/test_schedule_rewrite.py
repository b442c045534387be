"""Parsing and rewriting of scheduled sends, and bad input."""

from __future__ import annotations

import pytest

from broker_core import Broker, Message, MessageInner
from broker_core.errors import InvalidDelayError, ValidationError
from broker_core.schedule import DelayService, parse_schedule, schedule_properties

LV = [1000, 5000, 10_000]
NOW = 1_700_000_000_000


def test_level_parsed_and_clamped() -> None:
    assert parse_schedule({"DELAY": "2"}, NOW, LV).level == 2
    assert parse_schedule({"DELAY": "99"}, NOW, LV).level == 3
    assert parse_schedule({"DELAY": "0"}, NOW, LV) is None
    assert parse_schedule({}, NOW, LV) is None


def test_timer_properties_in_rocketmq_precedence() -> None:
    assert parse_schedule({"TIMER_DELAY_MS": "250"}, NOW, LV).deliver_ms == NOW + 250
    assert parse_schedule({"TIMER_DELAY_SEC": "3"}, NOW, LV).deliver_ms == NOW + 3000
    spec = parse_schedule({"TIMER_DELIVER_MS": str(NOW + 7)}, NOW, LV)
    assert spec is not None and spec.deliver_ms == NOW + 7 and spec.is_timer
    both = {"TIMER_DELAY_SEC": "1", "TIMER_DELAY_MS": "5"}
    assert parse_schedule(both, NOW, LV).deliver_ms == NOW + 1000
    # An absolute time already passed is an immediate message (RocketMQ 5).
    assert parse_schedule({"TIMER_DELIVER_MS": str(NOW - 1)}, NOW, LV) is None


@pytest.mark.parametrize(
    "props",
    [
        {"DELAY": "-1"},
        {"TIMER_DELAY_MS": "-5"},
        {"TIMER_DELAY_SEC": "-1"},
        {"TIMER_DELIVER_MS": "-1"},
        {"TIMER_DELAY_MS": str(3 * 86_400_000 + 1)},
        {"TIMER_DELAY_SEC": str(3 * 86_400 + 1)},
        {"TIMER_DELIVER_MS": str(NOW + 4 * 86_400_000)},
        {"DELAY": "2", "TIMER_DELAY_MS": "100"},
        {"DELAY": "x"},
        {"TIMER_DELAY_MS": "1.5"},
    ],
)
def test_bad_input_rejected(props: dict[str, str]) -> None:
    with pytest.raises(InvalidDelayError):
        parse_schedule(props, NOW, LV)


def test_default_max_delay_is_rocketmqs_three_days() -> None:
    """RocketMQ 5's ``timerMaxDelaySec`` = 259200: exactly 3 days is taken."""
    spec = parse_schedule({"TIMER_DELAY_SEC": "259200"}, NOW, LV)
    assert spec is not None and spec.deliver_ms == NOW + 259_200_000
    with pytest.raises(InvalidDelayError, match=r"beyond the maximum delay of 3 days"):
        parse_schedule({"TIMER_DELIVER_MS": str(NOW + 259_200_001)}, NOW, LV)


def test_max_delay_is_a_store_setting(tmp_path) -> None:
    """``timer_max_delay_s`` bounds what the send hook takes; levels are free."""
    with Broker.open(tmp_path / "s", timer_max_delay_s=60) as b:
        svc = DelayService(b)
        assert svc.max_delay_ms == 60_000
        assert svc.send_delayed(Message("Orders", b"ok"), delay_ms=60_000)
        with pytest.raises(InvalidDelayError, match="maximum delay of 1 min"):
            svc.send_delayed(Message("Orders", b"x"), delay_ms=60_001)
        with pytest.raises(InvalidDelayError):
            b.send(Message("Orders", b"x", properties={"TIMER_DELAY_SEC": "61"}))
        # A delay level is not a timer: its 2 hours are allowed.
        assert b.send(Message("Orders", b"l", properties={"DELAY": "18"}))
        svc.close()
    with pytest.raises(ValidationError):
        Broker.open(tmp_path / "t", timer_max_delay_s=0)


def test_max_delay_configurable() -> None:
    assert parse_schedule({"TIMER_DELAY_MS": "2000"}, NOW, LV, max_delay_ms=2000)
    with pytest.raises(InvalidDelayError):
        parse_schedule({"TIMER_DELAY_MS": "2001"}, NOW, LV, max_delay_ms=2000)


def test_schedule_properties_needs_exactly_one() -> None:
    assert schedule_properties(level=3) == {"DELAY": "3"}
    assert schedule_properties(delay_ms=5) == {"TIMER_DELAY_MS": "5"}
    for kwargs in ({}, {"level": 1, "delay_ms": 5}, {"delay_ms": -1}, {"level": 0}):
        with pytest.raises(InvalidDelayError):
            schedule_properties(**kwargs)


def test_bad_send_writes_nothing(broker: Broker, svc: DelayService) -> None:
    before = broker.store.max_physical_offset()
    bad = [
        Message("Orders", b"x", properties={"DELAY": "-2"}),
        Message("Orders", b"x", properties={"DELAY": "1", "TIMER_DELAY_MS": "10"}),
        Message("Orders", b"x", properties={"TIMER_DELAY_MS": str(40 * 86_400_000)}),
    ]
    for m in bad:
        with pytest.raises(InvalidDelayError):
            broker.send(m)
    with pytest.raises(InvalidDelayError):
        svc.send_delayed(Message("Orders", b"x"), level=2, delay_ms=10)
    with pytest.raises(InvalidDelayError):
        broker.send_batch([Message("Orders", b"ok"), bad[0]])
    assert broker.store.max_physical_offset() == before


def test_send_parks_in_schedule_topic(broker: Broker, svc: DelayService) -> None:
    r = broker.send(Message("Orders", b"x", tags="paid", properties={"DELAY": "3"}))
    assert (r.topic, r.queue_id) == ("SCHEDULE_TOPIC_XXXX", 2)
    m = broker.get_message(r.offset_msg_id)
    assert m.properties["REAL_TOPIC"] == "Orders"
    assert m.properties["DELAY"] == "3"
    unit = broker.store.get_queue_units("SCHEDULE_TOPIC_XXXX", 2, r.queue_offset, 1)[0]
    assert unit[2] == m.store_timestamp + 5000  # due time in the tag field
    t = svc.send_delayed(Message("Orders", b"y"), delay_ms=60_000)
    assert (t.topic, t.queue_id) == ("rmq_sys_wheel_timer", 0)
    assert int(broker.get_message(t.offset_msg_id).properties["TIMER_OUT_MS"]) > 0


def test_clients_cannot_forge_delivery_bookkeeping(
    broker: Broker, svc: DelayService
) -> None:
    from broker_core.errors import TopicNotAllowedError

    with pytest.raises(TopicNotAllowedError):
        broker.send(Message("rmq_sys_wheel_timer", b"x"))
    for i in range(3):
        broker.send(Message("Orders", f"m{i}".encode(), properties={"DELAY": "1"}))
    # A forged "already delivered" mark is refused on send (a reserved name) ...
    from broker_core.errors import ReservedPropertyError

    with pytest.raises(ReservedPropertyError):
        broker.send(Message("Orders", b"f", properties={"DELAY_SRC": "L1:2"}))
    # ... and a forged record (written past the hook) is ignored by the replay.
    broker.store.put_inner(
        MessageInner("Orders", 0, b"forged", {"DELAY_SRC": "L1:1", "UNIQ_KEY": "X"})
    )
    fresh = DelayService(broker)
    assert fresh.deliver_due(now_ms=2**41).levels_delivered == 3
    fresh.close()
