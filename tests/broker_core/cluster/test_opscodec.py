"""The admin API's tagged JSON (``opscodec``): the library's values come back
as they went, and nothing else is built from a request."""

from __future__ import annotations

import json

import pytest

from broker_core import Broker, Message
from broker_core.cluster import opscodec
from broker_core.errors import FilterSyntaxError, TopicNotFoundError
from broker_core.schedule.results import ScheduleKind
from broker_core.transaction.types import (
    HalfDetail,
    HalfInfo,
    HistoryEvent,
    ResolutionSource,
    TransactionState,
)


def roundtrip(value):
    return opscodec.decode(json.loads(json.dumps(opscodec.encode(value))))


def test_library_values_come_back_equal() -> None:
    info = HalfInfo(
        "T1", "M1", 10, 2, "PID", "orders", 1, "a", "k1 k2", 1_700_000_000_000,
        3, None, 1_700_000_060_000, TransactionState.COMMITTED,
        outcome_source=ResolutionSource.OPERATOR, operator="ann",
    )  # fmt: skip
    detail = HalfDetail(
        info, {"KEYS": "k1 k2", "__t": "tag-like"}, b"\x00\xffbody",
        [HistoryEvent(1, "CHECK", answer="UNKNOWN", latency_ms=1.5)],
    )  # fmt: skip
    assert roundtrip(detail) == detail
    assert roundtrip(ScheduleKind.TIMER) is ScheduleKind.TIMER
    value = {"rows": [("PID", 1, 2)], (1, 2): b"x", "n": None}
    assert roundtrip(value) == value


def test_a_stored_message_comes_back_whole(tmp_path) -> None:
    with Broker.open(tmp_path / "s") as b:
        b.create_topic("t", 1, 1)
        r = b.send(Message("t", b"payload", tags="a", keys="k"))
        m = b.get_message(r.msg_id)
    back = roundtrip(m)
    assert (back.msg_id, back.topic, back.body, back.tags, back.properties) == (
        m.msg_id, m.topic, m.body, m.tags, m.properties,
    )  # fmt: skip


@pytest.mark.parametrize(
    "data",
    [
        {"__t": "subprocess.Popen", "f": {"args": "ls"}},
        {"__t": "broker_core.transaction.types.HalfPage", "f": {"nope": 1}},
        {"__e": "os.PathLike", "v": 1},
    ],
)
def test_nothing_else_is_built(data) -> None:
    with pytest.raises(opscodec.CodecError):
        opscodec.decode(data)


def test_other_objects_cannot_be_sent() -> None:
    with pytest.raises(opscodec.CodecError):
        opscodec.encode(object())


def test_errors_come_back_as_the_library_s_own() -> None:
    err = opscodec.decode_error(
        json.loads(json.dumps(opscodec.encode_error(FilterSyntaxError("bad", 4, "x"))))
    )
    assert type(err) is FilterSyntaxError and str(err) == "bad"
    assert (err.position, err.expected) == (4, "x")
    err = opscodec.decode_error({"type": "TopicNotFoundError", "message": "no t"})
    assert isinstance(err, TopicNotFoundError)
    err = opscodec.decode_error({"type": "SystemExit", "message": "x"})
    assert type(err).__name__ == "BrokerError"
