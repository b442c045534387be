"""Report charts aggregate their whole table correctly (pure: no Spark).

Before: rows were keyed by the x value only, so a chart over a table with a
row per topic (or per group, tag...) and hour showed one row's numbers, not
the total; only the first 500 rows were read; empty hours were skipped."""

from __future__ import annotations

from datetime import datetime, timedelta

import pyarrow as pa

from console.reports.catalog import LAG_LABELS, REPORTS, Chart
from console.reports.views import CHART_SERIES, chart_series

H0 = datetime(2026, 11, 24, 10)


def _hourly() -> pa.Table:
    rows = [
        # two topics in hour 10, hour 11 empty, one topic in hour 12
        ("pg", "a", H0, 6000, 1, 100.0),
        ("pg", "b", H0, 6000, 3, 900.0),
        ("pg", "a", H0 + timedelta(hours=2), 5, 0, 50.0),
    ]
    return pa.table(
        {
            "producer_group": [r[0] for r in rows],
            "topic": [r[1] for r in rows],
            "hour": pa.array([r[2] for r in rows], pa.timestamp("us")),
            "commits": [r[3] for r in rows],
            "rollbacks": [r[4] for r in rows],
            "outcome_ms_p99": [r[5] for r in rows],
        }
    )


def test_counts_are_summed_across_topics_and_empty_hours_shown() -> None:
    c = chart_series(_hourly(), Chart("hourly", "hour", ("commits", "rollbacks")))
    assert c is not None
    assert c["labels"] == ["2026-11-24 10:00", "2026-11-24 11:00", "2026-11-24 12:00"]
    data = {d["label"]: d["data"] for d in c["datasets"]}
    assert data["commits"] == [12000, 0, 5]  # not 6000: both topics count
    assert data["rollbacks"] == [4, 0, 0]
    assert c["note"] == ""


def test_percentiles_take_the_worst_row_and_leave_gaps() -> None:
    (chart,) = [
        ch for ch in REPORTS["transaction_outcomes"].charts if "outcome_ms_p99" in ch.y
    ]
    c = chart_series(_hourly(), chart)
    assert c is not None
    p99 = {d["label"]: d["data"] for d in c["datasets"]}["outcome_ms_p99"]
    assert p99 == [900.0, None, 50.0]


def test_one_series_per_topic_and_a_note_when_cut() -> None:
    c = chart_series(_hourly(), Chart("hourly", "hour", ("commits",), series="topic"))
    assert c is not None
    assert {d["label"]: d["data"] for d in c["datasets"]} == {
        "a": [6000, 0, 5],
        "b": [6000, 0, 0],
    }
    many = pa.table(
        {
            "hour": pa.array([H0] * 20, pa.timestamp("us")),
            "topic": [f"t{i:02d}" for i in range(20)],
            "messages": list(range(20)),
        }
    )
    c = chart_series(many, Chart("t", "hour", ("messages",), series="topic"))
    assert c is not None and len(c["datasets"]) == CHART_SERIES
    assert c["datasets"][0]["label"] == "t19"  # the largest first
    assert f"the {CHART_SERIES} largest of 20 topics" in c["note"]


def test_lateness_buckets_keep_their_order_not_the_text_order() -> None:
    (chart,) = [c for c in REPORTS["delay_punctuality"].charts if c.x == "lag"]
    table = pa.table(
        {
            "bucket": ["L01 (1s)"] * 4,
            "lag": [">10 s", "<=1 s", "<=10 ms", "<=10 s"],
            "messages": [1, 2, 3, 4],
        }
    )
    c = chart_series(table, chart)
    assert c["labels"] == ["<=10 ms", "<=1 s", "<=10 s", ">10 s"]
    assert c["datasets"][0]["data"] == [3, 2, 4, 1]
    assert LAG_LABELS == ("early", "<=10 ms", "<=100 ms", "<=1 s", "<=10 s", ">10 s")
