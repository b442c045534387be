"""Delay punctuality transforms on small DataFrames."""

from __future__ import annotations

import pytest
from pyspark.testing import assertDataFrameEqual

from console.reports.jobs import delay_punctuality as dp

from .conftest import rec

pytestmark = pytest.mark.spark

LEVELS = [1000, 5000]


def parked_level(level, qoff, ts):
    return rec(
        "SCHEDULE_TOPIC_XXXX",
        queue_id=level - 1,
        queue_offset=qoff,
        store_ts=ts,
        props={"DELAY": str(level), "REAL_TOPIC": "t"},
    )


def parked_timer(qoff, ts, due):
    return rec(
        "rmq_sys_wheel_timer",
        queue_offset=qoff,
        store_ts=ts,
        props={"TIMER_OUT_MS": str(due), "REAL_TOPIC": "t"},
    )


def copy(src, ts):
    return rec("t", store_ts=ts, props={"DELAY_SRC": src})


@pytest.fixture
def log(records):
    return records(
        [
            parked_level(1, 0, 0),  # due 1000, delivered at 1003
            parked_level(1, 1, 10),  # due 1010, delivered at 1030
            parked_level(2, 0, 0),  # due 5000, not yet delivered
            parked_timer(0, 0, 250),  # delivered at 251
            parked_timer(1, 0, 9000),  # recalled
            rec(
                "rmq_sys_wheel_timer",
                queue_offset=2,
                store_ts=5,
                props={"TIMER_DEL_UNIQKEY": "t+X", "DELAY_SRC": "T:1"},
            ),
            copy("L1:0", 1003),
            copy("L1:1", 1030),
            copy("T:0", 251),
            rec("t", store_ts=7),  # an ordinary message
        ]
    )


def test_scheduled_rows(spark, log):
    got = dp.transform_scheduled(log, LEVELS).select(
        "kind", "level", "src", "due_ts", "lag_ms", "recalled_ts"
    )
    expected = spark.createDataFrame(
        [
            ("level", 1, "L1:0", 1000, 3, None),
            ("level", 1, "L1:1", 1010, 20, None),
            ("level", 2, "L2:0", 5000, None, None),
            ("timer", None, "T:0", 250, 1, None),
            ("timer", None, "T:1", 9000, None, 5),
        ],
        "kind string, level int, src string, due_ts long, lag_ms long, "
        "recalled_ts long",
    )
    assertDataFrameEqual(got, expected)


def test_punctuality_per_level(spark, log):
    got = dp.transform_punctuality(dp.transform_scheduled(log, LEVELS)).select(
        "bucket",
        "scheduled",
        "delivered",
        "recalled",
        "pending",
        "early",
        "lag_ms_p50",
        "lag_ms_max",
    )
    expected = spark.createDataFrame(
        [
            ("L01 (1s)", 2, 2, 0, 0, 0, 3, 20),
            ("L02 (5s)", 1, 0, 0, 1, 0, None, None),
            ("timer", 2, 1, 1, 0, 0, 1, 1),
        ],
        "bucket string, scheduled long, delivered long, recalled long, "
        "pending long, early long, lag_ms_p50 long, lag_ms_max long",
    )
    assertDataFrameEqual(got, expected)


def test_lag_histogram(spark, log):
    got = dp.transform_lag_histogram(dp.transform_scheduled(log, LEVELS))
    expected = spark.createDataFrame(
        [
            ("L01 (1s)", "<=10 ms", 1),
            ("L01 (1s)", "<=100 ms", 1),
            ("timer", "<=10 ms", 1),
        ],
        "bucket string, lag string, messages long",
    )
    assertDataFrameEqual(got, expected)


def test_copies_complete_their_own_nodes_message(spark, records):
    """Both nodes park a level-1 message at queue offset 0; only broker-b's
    was delivered, so broker-a's stays pending."""

    def on(node, row):
        return (*row[:-1], node)

    log = records(
        [
            on("broker-a", parked_level(1, 0, 0)),
            on("broker-b", parked_level(1, 0, 0)),
            on("broker-b", copy("L1:0", 1002)),
        ]
    )
    got = dp.transform_scheduled(log, LEVELS).select("node", "src", "lag_ms")
    expected = spark.createDataFrame(
        [("broker-a", "L1:0", None), ("broker-b", "L1:0", 2)],
        "node string, src string, lag_ms long",
    )
    assertDataFrameEqual(got, expected)


def test_late_deliveries_follow_the_threshold(spark, log):
    """Lags are 3, 20 (level 1) and 1 ms (timer): ``late_after_ms`` decides
    which count as late, per level and in the summary."""
    scheduled = dp.transform_scheduled(log, LEVELS)

    def late(after_ms):
        levels = dp.transform_punctuality(scheduled, after_ms)
        return {r["bucket"]: r["late"] for r in levels.collect()}

    assert late(1000) == {"L01 (1s)": 0, "L02 (5s)": 0, "timer": 0}
    assert late(2) == {"L01 (1s)": 2, "L02 (5s)": 0, "timer": 0}
    assert late(0) == {"L01 (1s)": 2, "L02 (5s)": 0, "timer": 1}
    summary = dp.summarize(dp.run(log, {"delay_levels_ms": LEVELS, "late_after_ms": 5}))
    assert summary["late"] == 1
