"""Topic traffic transforms on small DataFrames."""

from __future__ import annotations

import datetime as dt

import pytest
from pyspark.testing import assertDataFrameEqual

from console.reports.jobs import topic_traffic as tt

from .conftest import rec

pytestmark = pytest.mark.spark

H = 3_600_000


@pytest.fixture
def log(records):
    """The report's tables are computed from its cube of the records."""
    return tt.transform_traffic_cube(
        records(
            [
                rec("a", store_ts=0, body_size=10, tags="x", keys="k1 k2"),
                rec(
                    "a", store_ts=10, body_size=30, tags="x", keys="k1 k1"
                ),  # one message
                rec("a", store_ts=H, body_size=5000, tags="y"),
                rec("b", store_ts=20, body_size=100, tags="z", keys="k9"),
                rec("RMQ_SYS_TRANS_HALF_TOPIC", store_ts=0, body_size=7, tags="x"),
                rec("SCHEDULE_TOPIC_XXXX", store_ts=0, body_size=7, tags="x"),
                # Copies of messages counted on their own topic: not traffic.
                rec("%DLQ%grp", store_ts=0, body_size=10, tags="x"),
                rec("%RETRY%grp", store_ts=0, body_size=10, tags="x"),
                rec("b", store_ts=30, body_size=70, tags="z", keys="k9"),
            ]
        )
    )


def test_hourly(spark, log):
    h0, h1 = dt.datetime(1970, 1, 1, 0), dt.datetime(1970, 1, 1, 1)
    expected = spark.createDataFrame(
        [
            ("a", h0, 2, 40, 10, 20.0, 30),
            ("a", h1, 1, 5000, 5000, 5000.0, 5000),
            ("b", h0, 2, 170, 70, 85.0, 100),
        ],
        "topic string, hour timestamp, messages long, bytes long, min_body int, "
        "mean_body double, max_body int",
    )
    assertDataFrameEqual(tt.transform_hourly_traffic(log), expected)


def test_top_tags_and_keys(spark, log):
    tags = tt.transform_top_tags(log, limit=1)
    assertDataFrameEqual(
        tags,
        spark.createDataFrame(
            [("a", 1, "x", 2), ("b", 1, "z", 2)],
            "topic string, rank int, tag string, messages long",
        ),
    )
    keys = tt.transform_top_keys(log, limit=5)
    assertDataFrameEqual(
        keys,
        spark.createDataFrame(
            [("a", 1, "k1", 2), ("a", 2, "k2", 1), ("b", 1, "k9", 2)],
            "topic string, rank int, key string, messages long",
        ),
    )


def test_body_sizes(spark, log):
    assertDataFrameEqual(
        tt.transform_body_sizes(log),
        spark.createDataFrame(
            [
                ("a", "<=64 B", 2),
                ("a", "<=64 KiB", 1),
                ("b", "<=256 B", 2),
            ],
            "topic string, bucket string, messages long",
        ),
    )
