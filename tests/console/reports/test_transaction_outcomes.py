"""Transaction outcome transforms on small DataFrames."""

from __future__ import annotations

import datetime as dt

import pytest
from pyspark.testing import assertDataFrameEqual

from console.reports.jobs import transaction_outcomes as tx

from .conftest import rec

pytestmark = pytest.mark.spark

HALF, OP = "RMQ_SYS_TRANS_HALF_TOPIC", "RMQ_SYS_TRANS_OP_HALF_TOPIC"
H = 3_600_000  # one hour in ms


def half(offset, group, topic, ts, uniq):
    props = {"TRAN_MSG": "true", "PGROUP": group, "REAL_TOPIC": topic}
    props["UNIQ_KEY"] = uniq
    return rec(HALF, physical_offset=offset, store_ts=ts, props=props)


def op(offset, kind, half_offset, ts, outcome=None, source=None):
    props = {"TRANS_OFFSET": str(half_offset)}
    if outcome:
        props["TRAN_OUTCOME"] = outcome
    if source:
        props["TRAN_SOURCE"] = source
    return rec(OP, physical_offset=offset, store_ts=ts, tags=kind, props=props)


@pytest.fixture
def log(records):
    return records(
        [
            half(100, "G", "orders", 1_000, "A"),  # committed by the client
            half(200, "G", "orders", 2_000, "B"),  # checked twice, rolled back by check
            half(300, "G", "orders", 3_000, "C"),  # discarded, still discarded
            half(400, "G", "orders", 4_000, "D"),  # discarded, resumed: pending
            half(500, "G2", "pay", H + 5, "E"),  # pending, never checked
            half(600, "G2", "pay", H + 6, "F"),  # op lost: committed message only
            op(1000, "d", 100, 1_050, "COMMIT", "CLIENT"),
            op(1100, "c", 200, 2_500),
            op(1200, "c", 200, 3_500),
            op(1300, "d", 200, 3_600, "ROLLBACK", "CHECK"),
            op(1400, "c", 300, 9_000),
            op(1500, "x", 300, 9_100),
            op(1600, "x", 400, 9_200),
            op(1700, "r", 400, 9_300),
            rec(
                "pay",
                physical_offset=1800,
                store_ts=H + 60,
                sysflag=8,
                prepared_offset=600,
            ),
            rec("orders", physical_offset=1900, store_ts=5, tags="x"),  # noise
        ]
    )


def test_half_states(spark, log):
    got = tx.transform_half_states(log).select(
        "msg_id", "state", "decided_by", "outcome_ms", "checks", "discards"
    )
    expected = spark.createDataFrame(
        [
            ("A", "COMMITTED", "CLIENT", 50, 0, 0),
            ("B", "ROLLED_BACK", "CHECK", 1600, 2, 0),
            ("C", "DISCARDED", None, None, 1, 1),
            ("D", "PENDING", None, None, 0, 1),
            ("E", "PENDING", None, None, 0, 0),
            ("F", "COMMITTED", "UNKNOWN", 54, 0, 0),
        ],
        "msg_id string, state string, decided_by string, outcome_ms long, "
        "checks long, discards long",
    )
    assertDataFrameEqual(got, expected)


def test_outcomes_per_group_topic_hour(spark, log):
    got = tx.transform_outcomes_hourly(tx.transform_half_states(log)).select(
        "producer_group",
        "topic",
        "hour",
        "halves",
        "commits",
        "rollbacks",
        "discarded",
        "pending",
        "ever_discarded",
        "by_client",
        "by_check",
        "by_operator",
        "by_unknown",
        "outcome_ms_p50",
        "outcome_ms_max",
        "checks",
    )
    hour0 = dt.datetime(1970, 1, 1, 0, 0)
    hour1 = dt.datetime(1970, 1, 1, 1, 0)
    expected = spark.createDataFrame(
        [
            ("G", "orders", hour0, 4, 1, 1, 1, 1, 2, 1, 1, 0, 0, 50, 1600, 3),
            ("G2", "pay", hour1, 2, 1, 0, 0, 1, 0, 0, 0, 0, 1, 54, 54, 0),
        ],
        "producer_group string, topic string, hour timestamp, halves long, "
        "commits long, rollbacks long, discarded long, pending long, "
        "ever_discarded long, by_client long, by_check long, by_operator long, "
        "by_unknown long, outcome_ms_p50 long, outcome_ms_max long, checks long",
    )
    assertDataFrameEqual(got, expected)


def test_check_counts_and_longest_pending(spark, log):
    states = tx.transform_half_states(log)
    counts = tx.transform_check_counts(states)
    assertDataFrameEqual(
        counts,
        spark.createDataFrame(
            [("G", 0, 2), ("G", 1, 1), ("G", 2, 1), ("G2", 0, 2)],
            "producer_group string, checks long, halves long",
        ),
    )
    longest = tx.transform_longest_pending(states, now_ms=10_000, limit=2)
    assertDataFrameEqual(
        longest.select("msg_id", "state", "age_ms"),
        spark.createDataFrame(
            [("D", "PENDING", 6_000), ("E", "PENDING", 10_000 - H - 5)],
            "msg_id string, state string, age_ms long",
        ),
        checkRowOrder=True,
    )


def test_halves_of_two_nodes_at_one_offset(spark, records):
    """Two nodes' logs hold halves at the same offset: broker-a's is committed,
    broker-b's still pending; neither takes the other's outcome."""

    def on(node, row):
        return (*row[:-1], node)

    log = records(
        [
            on("broker-a", half(100, "G", "orders", 1_000, "A")),
            on("broker-a", op(900, "d", 100, 1_050, "COMMIT", "CLIENT")),
            on("broker-b", half(100, "G", "orders", 2_000, "B")),
        ]
    )
    got = tx.transform_half_states(log).select("node", "msg_id", "state")
    expected = spark.createDataFrame(
        [("broker-a", "A", "COMMITTED"), ("broker-b", "B", "PENDING")],
        "node string, msg_id string, state string",
    )
    assertDataFrameEqual(got, expected)


def test_stuck_halves_follow_the_threshold(spark, log):
    """A half still pending longer than ``stuck_after_s`` is stuck; the summary
    sums the hourly column, and the parameter moves the line."""
    states = tx.transform_half_states(log)
    now = H + 5 + 61_000  # D is ~1 h old, E 61 s old

    def stuck(after_s):
        hourly = tx.transform_outcomes_hourly(states, now, after_s)
        return {
            (r["producer_group"], r["hour"].hour): r["stuck"] for r in hourly.collect()
        }

    assert stuck(60) == {("G", 0): 1, ("G2", 1): 1}
    assert stuck(61) == {("G", 0): 1, ("G2", 1): 0}
    assert stuck(3_657) == {("G", 0): 1, ("G2", 1): 0}  # D: 3,657.005 s old
    assert stuck(3_658) == {("G", 0): 0, ("G2", 1): 0}
    params = {"now_ms": now, "stuck_after_s": 61}
    assert tx.summarize(tx.run(log, params))["stuck"] == 1
    # Without a moment nothing is stuck (the default threshold is 60 s).
    assert sum(stuck(60).values()) == 2
    no_moment = tx.transform_outcomes_hourly(states)
    assert [r["stuck"] for r in no_moment.collect()] == [0, 0]
