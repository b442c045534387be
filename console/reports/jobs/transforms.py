"""Pure report transforms: DataFrame of commit-log rows in, report rows out."""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

#: Internal topics kept out of the traffic report.
SYSTEM_PREFIXES = (
    "RMQ_SYS_",
    "SCHEDULE_TOPIC_XXXX",
    "TRANS_CHECK_MAX_TIME_TOPIC",
    "rmq_sys_",
)
HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"


def _is_system(col: F.Column) -> F.Column:
    cond = F.lit(False)
    for prefix in SYSTEM_PREFIXES:
        cond = cond | col.startswith(prefix)
    return cond


def transform_topic_traffic(records: DataFrame) -> DataFrame:
    """Per user topic and hour: messages, bytes, mean and max body size."""
    return (
        records.where(~_is_system(F.col("topic")))
        .withColumn("hour", F.date_trunc("hour", F.timestamp_millis("store_ts")))
        .groupBy("topic", "hour")
        .agg(
            F.count(F.lit(1)).alias("messages"),
            F.sum("body_size").alias("bytes"),
            F.avg("body_size").alias("mean_body"),
            F.max("body_size").alias("max_body"),
        )
        .orderBy("topic", "hour")
    )


def transform_top_tags(records: DataFrame, limit: int = 10) -> DataFrame:
    """Per user topic: the most frequent tags."""
    return (
        records.where(~_is_system(F.col("topic")) & F.col("tags").isNotNull())
        .groupBy("topic", "tags")
        .count()
        .orderBy(F.desc("count"), "topic", "tags")
        .limit(limit)
    )


def transform_halves_per_group(records: DataFrame) -> DataFrame:
    """Per producer group and real topic: half messages stored."""
    return (
        records.where(F.col("topic") == HALF_TOPIC)
        .select(
            F.col("properties")["PGROUP"].alias("producer_group"),
            F.col("properties")["REAL_TOPIC"].alias("topic"),
        )
        .groupBy("producer_group", "topic")
        .agg(F.count(F.lit(1)).alias("halves"))
        .orderBy("producer_group", "topic")
    )
