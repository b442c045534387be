"""What the report transforms share: the record schema, system topics, time range."""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

#: One row per commit-log record as the export stores it (``scan.ARROW_SCHEMA``,
#: as a Spark schema).
LOG_SCHEMA = T.StructType(
    [
        T.StructField("topic", T.StringType(), False),
        T.StructField("queue_id", T.IntegerType(), False),
        T.StructField("queue_offset", T.LongType(), False),
        T.StructField("physical_offset", T.LongType(), False),
        T.StructField("sysflag", T.IntegerType(), False),
        T.StructField("born_ts", T.LongType(), False),
        T.StructField("store_ts", T.LongType(), False),
        T.StructField("body_size", T.IntegerType(), False),
        T.StructField("prepared_offset", T.LongType(), False),
        T.StructField("tags", T.StringType(), True),
        T.StructField("keys", T.StringType(), True),
        T.StructField(
            "properties", T.MapType(T.StringType(), T.StringType(), True), False
        ),
    ]
)
#: What the report transforms read: a log record and the node whose log holds
#: it. Offsets (physical, queue) are per node, so every join by offset also
#: joins by node. A single host's records have node ``SINGLE_NODE``.
RECORD_SCHEMA = T.StructType(
    [*LOG_SCHEMA.fields, T.StructField("node", T.StringType(), False)]
)
#: The node column of a single host (no ``BROKER_NODE``): no name.
SINGLE_NODE = ""

HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
OP_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
DISCARD_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
TIMER_TOPIC = "rmq_sys_wheel_timer"
#: Internal topics: kept out of traffic, counted by the reports that read them.
SYSTEM_PREFIXES = ("RMQ_SYS_", "rmq_sys_", SCHEDULE_TOPIC, "TRANS_CHECK_")
TRANSACTION_MASK = 0xC
TRANSACTION_COMMIT = 0x8
#: Percentiles every latency column reports.
PERCENTILES = (0.5, 0.95, 0.99)
#: Accuracy of ``percentile_approx`` (relative error 1/accuracy of the ranks).
ACCURACY = 10_000


def prop(name: str) -> Column:
    """Return the record property ``name`` (NULL when absent)."""
    return F.col("properties").getItem(name)


def is_system(topic: Column) -> Column:
    """Return whether ``topic`` is an internal topic."""
    cond = F.lit(False)
    for prefix in SYSTEM_PREFIXES:
        cond = cond | topic.startswith(prefix)
    return cond


def hour_of(ms: Column) -> Column:
    """Return the UTC hour a millisecond timestamp falls in, as a timestamp."""
    return F.date_trunc("hour", F.timestamp_millis(ms))


def percentile_cols(value: str, prefix: str) -> list[Column]:
    """Return p50/p95/p99 aggregate columns of ``value`` named ``prefix_pNN``."""
    pct = F.percentile_approx(F.col(value), list(PERCENTILES), ACCURACY)
    return [
        pct.getItem(i).alias(f"{prefix}_p{int(p * 100)}")
        for i, p in enumerate(PERCENTILES)
    ]


def with_node(log: DataFrame, node: str) -> DataFrame:
    """Return ``LOG_SCHEMA`` rows with the ``node`` column (``RECORD_SCHEMA``)."""
    return log.withColumn("node", F.lit(node))


def transform_time_range(
    records: DataFrame, since_ms: int | None = None, until_ms: int | None = None
) -> DataFrame:
    """Return the records stored in ``[since_ms, until_ms)`` (either bound optional)."""
    if since_ms is not None:
        records = records.where(F.col("store_ts") >= F.lit(since_ms))
    if until_ms is not None:
        records = records.where(F.col("store_ts") < F.lit(until_ms))
    return records
