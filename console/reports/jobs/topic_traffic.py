"""Topic traffic per hour: messages, bytes, body sizes, top tags and keys."""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from console.reports.jobs.common import hour_of, is_system

NAME = "topic_traffic"
TOP_N = 10


#: Copies of messages already counted on their own topic: a retry or a
#: resend (``%RETRY%<group>``) and a dead letter (``%DLQ%<group>``).
COPY_PREFIXES = ("%RETRY%", "%DLQ%")


def _user(records: DataFrame) -> DataFrame:
    topic = F.col("topic")
    copy = topic.startswith(COPY_PREFIXES[0]) | topic.startswith(COPY_PREFIXES[1])
    return records.where(~is_system(topic) & ~copy)


def _bucket_order(size: Column) -> Column:
    order = F.when(size <= 64, 0).when(size <= 256, 1).when(size <= 1024, 2)
    return order.when(size <= 4096, 3).when(size <= 65536, 4).otherwise(5)


#: Body size buckets (powers of 4 bytes), by ``_bucket_order``.
BUCKETS = ("<=64 B", "<=256 B", "<=1 KiB", "<=4 KiB", "<=64 KiB", ">64 KiB")


def transform_traffic_cube(records: DataFrame) -> DataFrame:
    """The one pass over the records the report's tables are derived from.

    Per user topic, hour, tag, KEYS value and body size bucket: messages,
    bytes and the smallest and largest body. Small (topics x hours x distinct
    tags and keys x buckets), so the four tables cost one scan of the log.
    """
    return (
        _user(records)
        .groupBy(
            "topic",
            hour_of(F.col("store_ts")).alias("hour"),
            F.col("tags").alias("tag"),
            "keys",
            _bucket_order(F.col("body_size")).alias("bucket_order"),
        )
        .agg(
            F.count(F.lit(1)).alias("messages"),
            F.sum("body_size").alias("bytes"),
            F.min("body_size").alias("min_body"),
            F.max("body_size").alias("max_body"),
        )
    )


def transform_hourly_traffic(cube: DataFrame) -> DataFrame:
    """Per user topic and hour: messages, bytes and body sizes (min, mean, max)."""
    return (
        cube.groupBy("topic", "hour")
        .agg(
            F.sum("messages").alias("messages"),
            F.sum("bytes").alias("bytes"),
            F.min("min_body").alias("min_body"),
            F.round(F.sum("bytes") / F.sum("messages"), 1).alias("mean_body"),
            F.max("max_body").alias("max_body"),
        )
        .orderBy("topic", "hour")
    )


def _top(counts: DataFrame, column: str, limit: int) -> DataFrame:
    rank = Window.partitionBy("topic").orderBy(F.desc("messages"), column)
    return (
        counts.withColumn("rank", F.row_number().over(rank))
        .where(F.col("rank") <= limit)
        .orderBy("topic", "rank")
        .select("topic", "rank", column, "messages")
    )


def transform_top_tags(cube: DataFrame, limit: int = TOP_N) -> DataFrame:
    """Per user topic: its ``limit`` most frequent tags, ranked."""
    counts = (
        cube.where(F.col("tag").isNotNull())
        .groupBy("topic", "tag")
        .agg(F.sum("messages").alias("messages"))
    )
    return _top(counts, "tag", limit)


def transform_top_keys(cube: DataFrame, limit: int = TOP_N) -> DataFrame:
    """Per user topic: its ``limit`` most frequent keys (KEYS split on spaces; a
    key a message names twice counts once for it)."""
    keys = F.array_distinct(F.split("keys", " "))
    counts = (
        cube.where(F.col("keys").isNotNull())
        .select("topic", "messages", F.explode(keys).alias("key"))
        .where(F.col("key") != "")
        .groupBy("topic", "key")
        .agg(F.sum("messages").alias("messages"))
    )
    return _top(counts, "key", limit)


def transform_body_sizes(cube: DataFrame) -> DataFrame:
    """Per user topic: messages by body size bucket (powers of 4 bytes)."""
    order = F.col("bucket_order")
    label = F.when(order == 0, BUCKETS[0])
    for i, name in enumerate(BUCKETS[1:], start=1):
        label = label.when(order == i, name)
    return (
        cube.groupBy("topic", "bucket_order")
        .agg(F.sum("messages").alias("messages"))
        .orderBy("topic", "bucket_order")
        .select("topic", label.alias("bucket"), "messages")
    )


def run(records: DataFrame, params: dict) -> dict[str, DataFrame]:
    """Return the report's tables (the first is the main one)."""
    limit = int(params.get("top_n", TOP_N))
    cube = transform_traffic_cube(records).cache()
    return {
        "hourly": transform_hourly_traffic(cube),
        "top_tags": transform_top_tags(cube, limit),
        "top_keys": transform_top_keys(cube, limit),
        "body_sizes": transform_body_sizes(cube),
    }


def summarize(tables: dict[str, DataFrame]) -> dict:
    """Return the small JSON summary of the report's tables."""
    hourly = tables["hourly"]
    totals = hourly.agg(
        F.sum("messages").alias("messages"),
        F.sum("bytes").alias("bytes"),
        F.countDistinct("topic").alias("topics"),
        F.countDistinct("hour").alias("hours"),
    ).first()
    busiest = (
        hourly.groupBy("topic")
        .agg(F.sum("messages").alias("messages"))
        .orderBy(F.desc("messages"), "topic")
        .limit(5)
        .collect()
    )
    return {
        "messages": int(totals["messages"] or 0),
        "bytes": int(totals["bytes"] or 0),
        "topics": int(totals["topics"]),
        "hours": int(totals["hours"]),
        "busiest_topics": {r["topic"]: int(r["messages"]) for r in busiest},
    }
