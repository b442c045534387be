"""Topic traffic per hour: messages, bytes, body sizes, top tags and keys."""

from __future__ import annotations

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from console.reports.jobs.common import hour_of, is_system

NAME = "topic_traffic"
TOP_N = 10


def _user(records: DataFrame) -> DataFrame:
    return records.where(~is_system(F.col("topic")))


def transform_hourly_traffic(records: DataFrame) -> DataFrame:
    """Per user topic and hour: messages, bytes and body sizes (min, mean, max)."""
    return (
        _user(records)
        .groupBy("topic", hour_of(F.col("store_ts")).alias("hour"))
        .agg(
            F.count(F.lit(1)).alias("messages"),
            F.sum("body_size").alias("bytes"),
            F.min("body_size").alias("min_body"),
            F.round(F.avg("body_size"), 1).alias("mean_body"),
            F.max("body_size").alias("max_body"),
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


def transform_top_tags(records: DataFrame, limit: int = TOP_N) -> DataFrame:
    """Per user topic: its ``limit`` most frequent tags, ranked."""
    counts = (
        _user(records)
        .where(F.col("tags").isNotNull())
        .groupBy("topic", F.col("tags").alias("tag"))
        .agg(F.count(F.lit(1)).alias("messages"))
    )
    return _top(counts, "tag", limit)


def transform_top_keys(records: DataFrame, limit: int = TOP_N) -> DataFrame:
    """Per user topic: its ``limit`` most frequent keys (KEYS split on spaces)."""
    counts = (
        _user(records)
        .where(F.col("keys").isNotNull())
        .select("topic", F.explode(F.split("keys", " ")).alias("key"))
        .where(F.col("key") != "")
        .groupBy("topic", "key")
        .agg(F.count(F.lit(1)).alias("messages"))
    )
    return _top(counts, "key", limit)


def transform_body_sizes(records: DataFrame) -> DataFrame:
    """Per user topic: messages by body size bucket (powers of 4 bytes)."""
    size = F.col("body_size")
    bucket = (
        F.when(size <= 64, "<=64 B")
        .when(size <= 256, "<=256 B")
        .when(size <= 1024, "<=1 KiB")
        .when(size <= 4096, "<=4 KiB")
        .when(size <= 65536, "<=64 KiB")
        .otherwise(">64 KiB")
    )
    order = F.when(size <= 64, 0).when(size <= 256, 1).when(size <= 1024, 2)
    order = order.when(size <= 4096, 3).when(size <= 65536, 4).otherwise(5)
    return (
        _user(records)
        .groupBy("topic", order.alias("bucket_order"), bucket.alias("bucket"))
        .agg(F.count(F.lit(1)).alias("messages"))
        .orderBy("topic", "bucket_order")
        .drop("bucket_order")
    )


def run(records: DataFrame, params: dict) -> dict[str, DataFrame]:
    """Return the report's tables (the first is the main one)."""
    limit = int(params.get("top_n", TOP_N))
    return {
        "hourly": transform_hourly_traffic(records),
        "top_tags": transform_top_tags(records, limit),
        "top_keys": transform_top_keys(records, limit),
        "body_sizes": transform_body_sizes(records),
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
