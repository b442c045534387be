"""Consumer lag transforms on small DataFrames."""

from __future__ import annotations

import json

import pytest
from pyspark.testing import assertDataFrameEqual

from console.reports.jobs import consumer_lag as cl

from .conftest import rec

pytestmark = pytest.mark.spark


@pytest.fixture
def log(records):
    rows = [rec("t", queue_id=0, queue_offset=i, store_ts=100 + i) for i in range(5)]
    rows += [rec("t", queue_id=1, queue_offset=i, store_ts=200 + i) for i in range(2)]
    # A prepared half has no consume-queue unit: it never counts.
    rows.append(rec("t", queue_id=1, queue_offset=0, sysflag=4, store_ts=1))
    return records(rows)


def test_queue_and_group_lag(spark, log):
    offsets = spark.createDataFrame(
        [
            ("", "g", "t", 0, 2),
            ("", "g", "t", 1, 2),
            ("", "h", "t", 0, 0),
            ("", "h", "u", 0, 3),
        ],
        cl.OFFSETS_SCHEMA,
    )
    queues = cl.transform_queue_lag(log, offsets, now_ms=1_000)
    assertDataFrameEqual(
        queues.select("group", "topic", "queue_id", "max_offset", "lag", "lag_ms"),
        spark.createDataFrame(
            [
                ("g", "t", 0, 5, 3, 898),
                ("g", "t", 1, 2, 0, None),
                ("h", "t", 0, 5, 5, 900),
                ("h", "u", 0, 0, 0, None),
            ],
            "group string, topic string, queue_id int, max_offset long, lag long, "
            "lag_ms long",
        ),
    )
    groups = cl.transform_group_lag(queues)
    assertDataFrameEqual(
        groups.select("group", "topic", "queues", "queues_behind", "lag"),
        spark.createDataFrame(
            [("g", "t", 2, 1, 3), ("h", "t", 1, 1, 5), ("h", "u", 1, 0, 0)],
            "group string, topic string, queues long, queues_behind long, lag long",
        ),
    )


def test_queues_of_two_nodes_are_not_merged(spark, records):
    """Queue 0 of topic t on broker-a and on broker-b are two queues: each has
    its own end, committed offset and lag."""
    log = records(
        [rec("t", queue_offset=i, store_ts=10 + i, node="broker-a") for i in range(4)]
        + [rec("t", queue_offset=i, store_ts=50 + i, node="broker-b") for i in range(9)]
    )
    offsets = spark.createDataFrame(
        [("broker-a", "g", "t", 0, 3), ("broker-b", "g", "t", 0, 2)],
        cl.OFFSETS_SCHEMA,
    )
    queues = cl.transform_queue_lag(log, offsets, now_ms=100)
    assertDataFrameEqual(
        queues.select("node", "group", "topic", "queue_id", "max_offset", "lag",
                      "lag_ms"),
        spark.createDataFrame(
            [("broker-a", "g", "t", 0, 4, 1, 87), ("broker-b", "g", "t", 0, 9, 7, 48)],
            "node string, group string, topic string, queue_id int, "
            "max_offset long, lag long, lag_ms long",
        ),
    )  # fmt: skip
    (group,) = cl.transform_group_lag(queues).collect()
    assert (group["nodes"], group["queues"], group["lag"]) == (2, 2, 8)


def test_read_offsets(tmp_path):
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "consumerOffset.json").write_text(
        json.dumps({"offsetTable": {"t@g": {"0": 4, "1": 2}, "%RETRY%g@g": {"0": 1}}})
    )
    assert cl.read_offsets(tmp_path) == [
        ("g", "%RETRY%g", 0, 1),
        ("g", "t", 0, 4),
        ("g", "t", 1, 2),
    ]
    assert cl.read_offsets(tmp_path / "missing") == []


def test_behind_after_sets_which_queues_are_behind(spark, log):
    """Lags are 3 (g) and 5 (h): with ``behind_after`` 3 only h is behind, in
    the groups table and the summary's ``groups_behind``."""
    offsets = spark.createDataFrame(
        [("", "g", "t", 0, 2), ("", "h", "t", 0, 0)], cl.OFFSETS_SCHEMA
    )

    def behind(after):
        tables = cl.run(
            log, {"now_ms": 1_000, "offsets": offsets, "behind_after": after}
        )
        rows = {r["group"]: r["queues_behind"] for r in tables["groups"].collect()}
        return rows, cl.summarize(tables)["groups_behind"]

    assert behind(0) == ({"g": 1, "h": 1}, 2)
    assert behind(3) == ({"g": 0, "h": 1}, 1)
    assert behind(5) == ({"g": 0, "h": 0}, 0)
