"""Pulls with an SQL92 subscription through the Broker facade, on a real store."""

from __future__ import annotations

import pytest

from broker_core import Broker, Message, PullStatus
from broker_core.errors import FilterError, FilterSyntaxError


@pytest.fixture
def loaded(broker: Broker) -> Broker:
    broker.create_topic("Orders", read_queue_nums=1, write_queue_nums=1)
    for i in range(40):
        props = {"amount": str(i), "region": "eu" if i % 2 else "us"}
        if i % 5 == 0:
            props["amount"] = "n/a"  # evaluation error for numeric comparisons
        broker.send(
            Message("Orders", f"m{i}".encode(), tags=f"T{i % 3}", properties=props)
        )
    return broker


def test_sql92_pull_returns_only_true_matches(loaded: Broker) -> None:
    res = loaded.pull(
        "g",
        "Orders",
        0,
        0,
        100,
        "amount > 30 AND region = 'eu'",
        expression_type="SQL92",
    )
    assert res.status is PullStatus.FOUND
    assert [m.properties["amount"] for m in res.messages] == ["31", "33", "37", "39"]
    assert res.next_offset == 40


def test_sql92_pull_over_system_properties_and_paging(loaded: Broker) -> None:
    res = loaded.pull("g", "Orders", 0, 0, 2, "TAGS = 'T1'", expression_type="sql92")
    assert [m.tags for m in res.messages] == ["T1", "T1"]
    assert res.next_offset == 5  # offsets 1 and 4 matched; the pull stops there
    nxt = loaded.pull("g", "Orders", 0, res.next_offset, 100, "TAGS = 'T1'", "SQL92")
    assert len(nxt.messages) == 11


def test_sql92_pull_with_no_match_skips_ahead(loaded: Broker) -> None:
    res = loaded.pull(
        "g", "Orders", 0, 0, 10, "region = 'apac'", expression_type="SQL92"
    )
    assert res.status is PullStatus.NO_MATCHED_MSG
    assert res.messages == [] and res.next_offset == 40


def test_tag_expression_type_is_the_default(loaded: Broker) -> None:
    a = loaded.pull("g", "Orders", 0, 0, 100, "T0 || T2")
    b = loaded.pull("g", "Orders", 0, 0, 100, "T0 || T2", expression_type="TAG")
    assert [m.queue_offset for m in a.messages] == [m.queue_offset for m in b.messages]
    assert len(a.messages) == 27


def test_sql92_pull_rejects_bad_expressions(loaded: Broker) -> None:
    with pytest.raises(FilterSyntaxError):
        loaded.pull("g", "Orders", 0, 0, 10, "amount >", expression_type="SQL92")
    with pytest.raises(FilterError):
        loaded.pull("g", "Orders", 0, 0, 10, None, expression_type="SQL92")


def test_a_filtered_pull_past_its_deadline_stops_after_one_evaluation(
    broker: Broker,
) -> None:
    """A costly filter over many non-matching messages: a pull whose deadline
    has passed evaluates one message and says where to go on (one evaluation
    may itself be costly: CONTAINS over 32 KiB values); reading on from there
    finds every match once (nothing skipped, nothing twice)."""
    import time

    broker.create_topic("Wide", read_queue_nums=1, write_queue_nums=1)
    for i in range(1000):
        broker.send(Message("Wide", b"x", properties={"n": str(i)}))
    # Near the heaviest expression the parser takes: 401 terms.
    expr = " AND ".join(f"n <> {i}" for i in range(400)) + " AND n >= 800"
    past = time.monotonic() - 1
    r = broker.pull("g", "Wide", 0, 0, 32, expr, "SQL92", deadline=past)
    assert r.next_offset == 1 and r.messages == []  # one evaluation, then stop
    found, offset, pulls = [], 0, 0
    while offset < 1000:
        r = broker.pull("g", "Wide", 0, offset, 32, expr, "SQL92", deadline=past)
        found += [int(m.properties["n"]) for m in r.messages]
        assert r.next_offset > offset
        offset, pulls = r.next_offset, pulls + 1
    assert found == list(range(800, 1000))
    # Without a deadline the same read scans up to 16 x 32 units at once.
    r = broker.pull("g", "Wide", 0, 0, 32, expr, "SQL92")
    assert r.next_offset == 512
