"""Message search: by id, by key, by topic and time, tag and SQL92 filters, paging."""

from __future__ import annotations

import time

import pytest

from broker_core import Broker, Message
from broker_core import search as search_module
from broker_core.errors import (
    FilterSyntaxError,
    InvalidQueueError,
    TopicNotFoundError,
    ValidationError,
)
from broker_core.message import MessageExt
from broker_core.search import (
    MessageQuery,
    SearchPage,
    search_messages,
)


def _send(broker: Broker, topic: str, n: int, start: int = 0) -> None:
    for i in range(start, start + n):
        broker.send(
            Message(
                topic,
                f"body-{i}".encode(),
                tags=f"T{i % 3}",
                keys=[f"k{i}", "common" if i % 4 == 0 else f"x{i}"],
                properties={"n": str(i), "kind": "odd" if i % 2 else "even"},
            )
        )


@pytest.fixture
def loaded(broker: Broker) -> Broker:
    broker.create_topic("Shop", read_queue_nums=4, write_queue_nums=4)
    _send(broker, "Shop", 60)
    return broker


def numbers(page: SearchPage | list[MessageExt]) -> list[int]:
    msgs = page.messages if isinstance(page, SearchPage) else page
    return [int(m.properties["n"]) for m in msgs]


def collect(broker: Broker, query: MessageQuery, **kw: int) -> tuple[list[int], int]:
    """Follow cursors to the end; return every result and the number of calls."""
    out: list[int] = []
    cursor = None
    calls = 0
    while True:
        page = search_messages(broker, query, cursor=cursor, **kw)
        calls += 1
        out += numbers(page)
        cursor = page.cursor
        if cursor is None:
            return out, calls
        assert calls < 1000


def test_topic_scan_is_newest_first_across_queues(loaded: Broker) -> None:
    page = search_messages(loaded, MessageQuery(topic="Shop"), limit=100)
    assert numbers(page) == list(range(59, -1, -1))
    assert {m.queue_id for m in page.messages} == {0, 1, 2, 3}
    assert page.cursor is None
    assert page.scanned == 60


def test_pages_follow_cursors_without_gaps_or_repeats(loaded: Broker) -> None:
    first = search_messages(loaded, MessageQuery(topic="Shop"), limit=7)
    assert numbers(first) == list(range(59, 52, -1))
    assert first.cursor is not None
    everything, calls = collect(loaded, MessageQuery(topic="Shop"), limit=7)
    assert everything == list(range(59, -1, -1))
    assert calls == 9


def test_scan_budget_bounds_each_call_and_the_cursor_continues(loaded: Broker) -> None:
    query = MessageQuery(topic="Shop", sql="n > 50 OR n < 3")
    page = search_messages(loaded, query, limit=100, scan_budget=5)
    assert page.scanned == 5 and numbers(page) == [59, 58, 57, 56, 55]
    found, calls = collect(loaded, query, limit=100, scan_budget=5)
    assert found == [59, 58, 57, 56, 55, 54, 53, 52, 51, 2, 1, 0]
    assert calls == 12


def test_tag_filter(loaded: Broker) -> None:
    page = search_messages(
        loaded, MessageQuery(topic="Shop", tag="T1 || T2"), limit=100
    )
    assert numbers(page) == [i for i in range(59, -1, -1) if i % 3 in (1, 2)]
    assert all(m.tags in ("T1", "T2") for m in page.messages)


def test_sql_filter_over_properties(loaded: Broker) -> None:
    q = MessageQuery(topic="Shop", sql="kind = 'odd' AND n BETWEEN 10 AND 20")
    assert numbers(search_messages(loaded, q, limit=100)) == [19, 17, 15, 13, 11]
    q = MessageQuery(topic="Shop", sql="TAGS = 'T0' AND KEYS CONTAINS 'common'")
    assert numbers(search_messages(loaded, q, limit=100)) == [48, 36, 24, 12, 0]


def test_sql_filter_over_typed_system_fields(loaded: Broker) -> None:
    all_msgs = search_messages(loaded, MessageQuery(topic="Shop"), limit=100).messages
    q2 = [m for m in all_msgs if m.queue_id == 2 and m.queue_offset >= 10]
    q = MessageQuery(topic="Shop", sql="queueId = 2 AND queueOffset >= 10")
    assert numbers(search_messages(loaded, q, limit=100)) == numbers(q2)
    pivot = all_msgs[30].commit_log_offset
    q = MessageQuery(topic="Shop", sql=f"commitLogOffset <= {pivot} AND topic = 'Shop'")
    assert numbers(search_messages(loaded, q, limit=100)) == numbers(all_msgs[30:])
    # A typed number compared with a string literal parses the string.
    q = MessageQuery(topic="Shop", sql="queueId = '3' AND storeTimestamp > 0")
    assert {m.queue_id for m in search_messages(loaded, q, limit=100).messages} == {3}


def test_sql_evaluation_errors_are_counted_not_matched(loaded: Broker) -> None:
    page = search_messages(
        loaded, MessageQuery(topic="Shop", sql="kind > 1"), scan_budget=10
    )
    assert page.messages == [] and page.errors == 10


def test_queue_restriction(loaded: Broker) -> None:
    page = search_messages(loaded, MessageQuery(topic="Shop", queue_id=1), limit=100)
    offsets = [m.queue_offset for m in page.messages]
    assert {m.queue_id for m in page.messages} == {1}
    assert offsets == sorted(offsets, reverse=True) and len(offsets) == 15


def test_time_range_is_exact_and_bounds_the_scan(
    broker: Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    broker.create_topic("Timed", read_queue_nums=2, write_queue_nums=2)
    for burst in range(3):
        _send(broker, "Timed", 10, start=burst * 10)
        time.sleep(0.05)
    every = search_messages(broker, MessageQuery(topic="Timed"), limit=100).messages
    by_n = {int(m.properties["n"]): m.store_timestamp for m in every}
    begin, end = by_n[10], by_n[19]
    expected = sorted((n for n, ts in by_n.items() if begin <= ts <= end), reverse=True)
    q = MessageQuery(topic="Timed", begin_ms=begin, end_ms=end)
    page = search_messages(broker, q, limit=100)
    assert numbers(page) == expected and set(range(10, 20)) <= set(expected)
    # Without slack the binary search over store times skips the other bursts.
    monkeypatch.setattr(search_module, "TIME_SLACK_MS", 0)
    page = search_messages(broker, q, limit=100)
    assert numbers(page) == expected and page.scanned == len(expected)


def test_search_by_id(loaded: Broker) -> None:
    res = loaded.send(Message("Shop", b"x", tags="ID", properties={"n": "100"}))
    for msg_id in (res.msg_id, res.offset_msg_id):
        page = search_messages(loaded, MessageQuery(msg_id=msg_id))
        assert numbers(page) == [100] and page.cursor is None
    assert (
        search_messages(loaded, MessageQuery(msg_id=res.msg_id, tag="T0")).messages
        == []
    )
    assert search_messages(loaded, MessageQuery(msg_id="ABCDEF")).messages == []


def test_search_by_key_newest_first_with_paging(loaded: Broker) -> None:
    q = MessageQuery(topic="Shop", key="common")
    assert numbers(search_messages(loaded, q, limit=100)) == list(range(56, -1, -4))
    found, calls = collect(loaded, q, limit=4)
    assert found == list(range(56, -1, -4)) and calls == 4
    q = MessageQuery(topic="Shop", key="common", sql="n < 20")
    assert numbers(search_messages(loaded, q)) == [16, 12, 8, 4, 0]


def test_search_by_key_across_topics(loaded: Broker) -> None:
    loaded.create_topic("Other", read_queue_nums=1, write_queue_nums=1)
    loaded.send(Message("Other", b"o", keys="common", properties={"n": "999"}))
    page = search_messages(loaded, MessageQuery(key="common"), limit=3)
    assert numbers(page) == [999, 56, 52]


@pytest.mark.parametrize(
    ("query", "kwargs", "error"),
    [
        (MessageQuery(), {}, ValidationError),
        (MessageQuery(topic="Shop"), {"limit": 0}, ValidationError),
        (MessageQuery(topic="Shop"), {"scan_budget": 0}, ValidationError),
        (MessageQuery(topic="Shop", begin_ms=5, end_ms=4), {}, ValidationError),
        (MessageQuery(topic="Shop"), {"cursor": "!!not a cursor"}, ValidationError),
        (MessageQuery(topic="Shop", sql="n >"), {}, FilterSyntaxError),
        (MessageQuery(topic="Nope"), {}, TopicNotFoundError),
        (MessageQuery(topic="Shop", queue_id=9), {}, InvalidQueueError),
    ],
)
def test_invalid_searches(
    loaded: Broker, query: MessageQuery, kwargs: dict[str, object], error: type
) -> None:
    with pytest.raises(error):
        search_messages(loaded, query, **kwargs)  # type: ignore[arg-type]


def test_cursor_of_another_query_is_rejected(loaded: Broker) -> None:
    page = search_messages(loaded, MessageQuery(topic="Shop"), limit=5)
    assert page.cursor is not None
    with pytest.raises(ValidationError):
        search_messages(
            loaded, MessageQuery(topic="Shop", tag="T1"), cursor=page.cursor
        )


def test_messages_sent_after_a_cursor_do_not_disturb_it(loaded: Broker) -> None:
    page = search_messages(loaded, MessageQuery(topic="Shop"), limit=30)
    _send(loaded, "Shop", 10, start=60)
    rest = search_messages(
        loaded, MessageQuery(topic="Shop"), limit=100, cursor=page.cursor
    )
    assert numbers(rest) == list(range(29, -1, -1))


def test_scan_across_commit_log_segments(broker: Broker) -> None:
    broker.create_topic("Big", read_queue_nums=3, write_queue_nums=3)
    pad = "p" * 300  # about 500-byte records: 64 KiB segments roll every ~130
    for start in range(0, 900, 100):
        broker.send_batch(
            [
                Message(
                    "Big", b"x", tags=f"T{i % 5}", properties={"n": str(i), "pad": pad}
                )
                for i in range(start, start + 100)
            ]
        )
    found, calls = collect(
        broker, MessageQuery(topic="Big", sql="n > 100 AND TAGS = 'T3'"), limit=50
    )
    assert found == [i for i in range(899, 100, -1) if i % 5 == 3]
    assert calls == 4
    every = search_messages(broker, MessageQuery(topic="Big"), limit=1000).messages
    offsets = [m.commit_log_offset for m in every]
    assert offsets == sorted(offsets, reverse=True) and len(offsets) == 900
    assert offsets[0] // (64 * 1024) >= 5  # the data really spans several segments
