"""Consumer lag per node, group and queue: committed offsets against the log's end.

Queue ids repeat across the nodes of a cluster (broker-a's queue 0 of a topic
is not broker-b's), so a queue is named by its node too. The log gives each
queue's end (the highest queue offset of a record that has a consume-queue
unit, plus one: transaction value NOT or COMMIT) and the store time of
the first message a group has not consumed; committed offsets come from the
store's ``config/consumerOffset.json`` (on a cluster, the copy each node's
export carries, ``nodes.export_node``).
"""

from __future__ import annotations

from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from broker_core.errors import ConfigFileError
from broker_core.metadata import read_config
from console.reports.jobs.common import SINGLE_NODE, TRANSACTION_MASK
from console.reports.jobs.errors import ReportInputError

NAME = "consumer_lag"

OFFSETS_SCHEMA = T.StructType(
    [
        T.StructField("node", T.StringType(), False),
        T.StructField("group", T.StringType(), False),
        T.StructField("topic", T.StringType(), False),
        T.StructField("queue_id", T.IntegerType(), False),
        T.StructField("committed", T.LongType(), False),
    ]
)


def read_offsets(store_dir: str | Path) -> list[tuple[str, str, int, int]]:
    """Return (group, topic, queue, committed offset) rows of the store.

    A damaged file is read from its ``.bak`` as the store itself does; with
    neither readable, ``ReportInputError``: lag computed without the offsets
    would be wrong, not merely empty. No file at all is no group."""

    def rows_of(table: dict) -> list[tuple[str, str, int, int]]:
        rows = []
        for key, queues in table.items():
            topic, _, group = key.rpartition("@")
            for qid, offset in queues.items():
                rows.append((group, topic, int(qid), int(offset)))
        return sorted(rows)

    path = Path(store_dir) / "config" / "consumerOffset.json"
    try:
        return read_config(path, "offsetTable", rows_of)
    except ConfigFileError as exc:
        raise ReportInputError(
            f"the consumer offsets cannot be read: {exc} "
            f"(`python -m broker_core verify {store_dir}` checks every file)"
        ) from exc


def offsets_frame(
    spark: SparkSession, store_dir: str | Path, node: str = SINGLE_NODE
) -> DataFrame:
    """Return the store's committed offsets as a DataFrame of ``OFFSETS_SCHEMA``."""
    rows = [(node, *row) for row in read_offsets(store_dir)]
    return spark.createDataFrame(rows, OFFSETS_SCHEMA)


def transform_queue_lag(
    records: DataFrame, offsets: DataFrame, now_ms: int
) -> DataFrame:
    """Per node, group, topic and queue: committed, end, lag in messages and in
    time."""
    queue = ["node", "topic", "queue_id"]
    queued = records.where(
        F.col("sysflag").bitwiseAND(TRANSACTION_MASK).isin(0, 0x8)
    ).select(*queue, "queue_offset", "store_ts")
    ends = queued.groupBy(*queue).agg(
        (F.max("queue_offset") + 1).alias("max_offset"),
        F.max("store_ts").alias("last_store_ts"),
    )
    first_unconsumed = queued.join(
        F.broadcast(
            offsets.select(*queue, F.col("committed").alias("queue_offset")).distinct()
        ),
        [*queue, "queue_offset"],
    ).select(
        *queue,
        F.col("queue_offset").alias("committed"),
        F.col("store_ts").alias("oldest_unconsumed_ts"),
    )
    lag = F.greatest(F.col("max_offset") - F.col("committed"), F.lit(0))
    return (
        offsets.join(ends, queue, "left")
        .join(first_unconsumed, [*queue, "committed"], "left")
        .withColumn("max_offset", F.coalesce("max_offset", F.lit(0)))
        .select(
            "group",
            "topic",
            "node",
            "queue_id",
            "committed",
            "max_offset",
            lag.alias("lag"),
            "oldest_unconsumed_ts",
            F.when(lag > 0, F.lit(now_ms) - F.col("oldest_unconsumed_ts")).alias(
                "lag_ms"
            ),
            "last_store_ts",
        )
        .orderBy("group", "topic", "node", "queue_id")
    )


def transform_group_lag(queue_lag: DataFrame, behind_after: int = 0) -> DataFrame:
    """Per group and topic over every node: total lag, queues behind (lag over
    ``behind_after`` messages), oldest unconsumed age, and on how many nodes
    the group has committed offsets."""
    return (
        queue_lag.groupBy("group", "topic")
        .agg(
            F.countDistinct("node").alias("nodes"),
            F.count(F.lit(1)).alias("queues"),
            F.sum(F.when(F.col("lag") > F.lit(behind_after), 1).otherwise(0)).alias(
                "queues_behind"
            ),
            F.sum("committed").alias("committed"),
            F.sum("max_offset").alias("max_offset"),
            F.sum("lag").alias("lag"),
            F.max("lag_ms").alias("max_lag_ms"),
        )
        .orderBy(F.desc("lag"), "group", "topic")
    )


def run(records: DataFrame, params: dict) -> dict[str, DataFrame]:
    """Return the report's tables (the first is the main one)."""
    offsets = params.get("offsets")
    if offsets is None:
        offsets = offsets_frame(records.sparkSession, params["store_dir"])
    queues = transform_queue_lag(records, offsets, int(params["now_ms"])).cache()
    behind_after = int(params.get("behind_after", 0))
    return {"groups": transform_group_lag(queues, behind_after), "queues": queues}


def summarize(tables: dict[str, DataFrame]) -> dict:
    """Return the small JSON summary of the report's tables."""
    groups = tables["groups"]
    row = groups.agg(
        F.countDistinct("group").alias("groups"),
        F.countDistinct(F.when(F.col("queues_behind") > 0, F.col("group"))).alias(
            "groups_behind"
        ),
        F.sum("lag").alias("lag"),
        F.max("max_lag_ms").alias("max_lag_ms"),
    ).first()
    worst = groups.limit(5).collect()
    return {
        "groups": int(row["groups"]),
        "groups_behind": int(row["groups_behind"]),
        "lag": int(row["lag"] or 0),
        "max_lag_ms": row["max_lag_ms"],
        "most_behind": [
            {"group": r["group"], "topic": r["topic"], "lag": int(r["lag"])}
            for r in worst
        ],
    }
