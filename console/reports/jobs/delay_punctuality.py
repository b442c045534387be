"""Delay punctuality: per delay level and for timers, how late delivery was.

Read from the log as ``broker_core.schedule`` writes it (docs/delay.md): a level
message is parked in ``SCHEDULE_TOPIC_XXXX`` queue ``level - 1`` (``DELAY``), due
``store time + delay(level)``; a timer in ``rmq_sys_wheel_timer`` with the exact
due time in ``TIMER_OUT_MS``; every delivered copy names what it completes in
``DELAY_SRC`` (``L<level>:<queue offset>`` or ``T:<queue offset>``), and so does
a recall marker (a timer-topic record with ``TIMER_DEL_UNIQKEY``).
Lag = the copy's store time - due time (never negative when delivery is right).
Queue offsets are per node: a copy completes the parked message of its own node.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from console.reports.catalog import LAG_BUCKETS, LAG_LABELS
from console.reports.jobs.common import (
    SCHEDULE_TOPIC,
    TIMER_TOPIC,
    is_system,
    percentile_cols,
    prop,
)

NAME = "delay_punctuality"
#: A delivery later than this after its due time is late (``late_after_ms``).
LATE_AFTER_MS = 1000


def transform_scheduled(records: DataFrame, delay_levels_ms: list[int]) -> DataFrame:
    """One row per parked message: kind, level, due time, delivery and recall."""
    levels = F.array(*[F.lit(int(ms)) for ms in delay_levels_ms])
    level = prop("DELAY").cast("int")
    parked_levels = records.where(
        (F.col("topic") == SCHEDULE_TOPIC) & level.isNotNull()
    ).select(
        "node",
        F.lit("level").alias("kind"),
        level.alias("level"),
        F.element_at(levels, level).alias("delay_ms"),
        F.concat(
            F.lit("L"), level.cast("string"), F.lit(":"), F.col("queue_offset")
        ).alias("src"),
        F.coalesce(prop("REAL_TOPIC"), F.lit("")).alias("topic"),
        F.col("store_ts").alias("scheduled_ts"),
        (F.col("store_ts") + F.element_at(levels, level)).alias("due_ts"),
    )
    parked_timers = records.where(
        (F.col("topic") == TIMER_TOPIC)
        & prop("TIMER_OUT_MS").isNotNull()
        & prop("TIMER_DEL_UNIQKEY").isNull()
    ).select(
        "node",
        F.lit("timer").alias("kind"),
        F.lit(None).cast("int").alias("level"),
        (prop("TIMER_OUT_MS").cast("long") - F.col("store_ts")).alias("delay_ms"),
        F.concat(F.lit("T:"), F.col("queue_offset")).alias("src"),
        F.coalesce(prop("REAL_TOPIC"), F.lit("")).alias("topic"),
        F.col("store_ts").alias("scheduled_ts"),
        prop("TIMER_OUT_MS").cast("long").alias("due_ts"),
    )
    delivered = (
        records.where(~is_system(F.col("topic")) & prop("DELAY_SRC").isNotNull())
        .groupBy("node", prop("DELAY_SRC").alias("src"))
        .agg(F.min("store_ts").alias("delivered_ts"), F.count(F.lit(1)).alias("n"))
    )
    recalled = (
        records.where(
            (F.col("topic") == TIMER_TOPIC) & prop("TIMER_DEL_UNIQKEY").isNotNull()
        )
        .groupBy("node", prop("DELAY_SRC").alias("src"))
        .agg(F.min("store_ts").alias("recalled_ts"))
    )
    return (
        parked_levels.unionByName(parked_timers)
        .join(delivered, ["node", "src"], "left")
        .join(recalled, ["node", "src"], "left")
        .select(
            "node",
            "kind",
            "level",
            "delay_ms",
            "src",
            "topic",
            "scheduled_ts",
            "due_ts",
            "delivered_ts",
            "recalled_ts",
            (F.col("delivered_ts") - F.col("due_ts")).alias("lag_ms"),
            F.coalesce(F.col("n") - 1, F.lit(0)).alias("duplicates"),
        )
    )


def _bucket(scheduled: DataFrame) -> DataFrame:
    """Add ``bucket``: "L<n> (<delay>)" for a level ("L03 (10s)", RocketMQ's
    own notation for the delay), "timer" for timers."""
    ms = F.col("delay_ms")
    delay = (
        F.when(ms % 3_600_000 == 0, F.concat((ms / 3_600_000).cast("long"), F.lit("h")))
        .when(ms % 60_000 == 0, F.concat((ms / 60_000).cast("long"), F.lit("m")))
        .when(ms % 1000 == 0, F.concat((ms / 1000).cast("long"), F.lit("s")))
        .otherwise(F.concat(ms.cast("long"), F.lit(" ms")))
    )
    label = F.when(
        F.col("kind") == "level",
        F.concat(
            F.lit("L"),
            F.lpad(F.col("level").cast("string"), 2, "0"),
            F.when(ms.isNotNull(), F.concat(F.lit(" ("), delay, F.lit(")"))).otherwise(
                F.lit("")
            ),
        ),
    ).otherwise(F.lit("timer"))
    return scheduled.withColumn("bucket", label)


def transform_punctuality(
    scheduled: DataFrame, late_after_ms: int = LATE_AFTER_MS
) -> DataFrame:
    """Per level (and timers): scheduled, delivered, recalled, pending, early,
    late (delivered more than ``late_after_ms`` after due), lag."""

    def count_of(cond):
        return F.sum(F.when(cond, 1).otherwise(0)).cast("long")

    delivered = F.col("delivered_ts").isNotNull()
    recalled = F.col("recalled_ts").isNotNull()
    return (
        _bucket(scheduled)
        .groupBy("bucket", "kind", "level")
        .agg(
            F.count(F.lit(1)).alias("scheduled"),
            count_of(delivered).alias("delivered"),
            count_of(recalled).alias("recalled"),
            count_of(~delivered & ~recalled).alias("pending"),
            count_of(F.col("lag_ms") < 0).alias("early"),
            count_of(F.col("lag_ms") > F.lit(late_after_ms)).alias("late"),
            F.sum("duplicates").cast("long").alias("duplicates"),
            F.min("delay_ms").alias("delay_ms"),
            *percentile_cols("lag_ms", "lag_ms"),
            F.max("lag_ms").alias("lag_ms_max"),
        )
        .orderBy("bucket")
        .drop("kind")
    )


def transform_lag_histogram(scheduled: DataFrame) -> DataFrame:
    """Delivered messages per level (and timers) by lag bucket."""
    lag = F.col("lag_ms")
    label = F.lit(LAG_LABELS[-1])
    order = F.lit(len(LAG_BUCKETS))
    for i, (upper, name) in reversed(list(enumerate(LAG_BUCKETS))):
        label = F.when(lag <= upper if upper >= 0 else lag < 0, name).otherwise(label)
        order = F.when(lag <= upper if upper >= 0 else lag < 0, i).otherwise(order)
    return (
        _bucket(scheduled)
        .where(lag.isNotNull())
        .groupBy("bucket", order.alias("lag_order"), label.alias("lag"))
        .agg(F.count(F.lit(1)).alias("messages"))
        .orderBy("bucket", "lag_order")
        .drop("lag_order")
    )


def run(records: DataFrame, params: dict) -> dict[str, DataFrame]:
    """Return the report's tables (the first is the main one)."""
    scheduled = transform_scheduled(records, params["delay_levels_ms"]).cache()
    return {
        "levels": transform_punctuality(
            scheduled, int(params.get("late_after_ms", LATE_AFTER_MS))
        ),
        "lag_histogram": transform_lag_histogram(scheduled),
        "scheduled": scheduled,
    }


def summarize(tables: dict[str, DataFrame]) -> dict:
    """Return the small JSON summary of the report's tables."""
    scheduled = tables["scheduled"]
    row = scheduled.agg(
        F.count(F.lit(1)).alias("scheduled"),
        F.count("delivered_ts").alias("delivered"),
        F.count("recalled_ts").alias("recalled"),
        F.sum(F.when(F.col("lag_ms") < 0, 1).otherwise(0)).alias("early"),
        *percentile_cols("lag_ms", "lag_ms"),
        F.max("lag_ms").alias("lag_ms_max"),
    ).first()
    late = tables["levels"].agg(F.sum("late")).first()[0]
    out = {k: (int(v) if v is not None else None) for k, v in row.asDict().items()}
    return out | {"late": int(late or 0)}
