"""Transaction outcomes: how halves end, who decided, how long they hung.

Read from the log as ``broker_core.transaction`` writes it (docs/transactions.md):
halves in ``RMQ_SYS_TRANS_HALF_TOPIC``; op records in
``RMQ_SYS_TRANS_OP_HALF_TOPIC`` tagged ``d`` (outcome, ``TRAN_OUTCOME`` and
``TRAN_SOURCE``), ``c`` (a check-back), ``x`` (a discard) and ``r`` (a resume),
each naming its half by ``TRANS_OFFSET``; a committed message whose op was lost
to a torn write still names its half by its prepared-transaction offset. Those
offsets are positions in one node's log: a half is named by node and offset.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from console.reports.jobs.common import (
    HALF_TOPIC,
    OP_TOPIC,
    TRANSACTION_COMMIT,
    TRANSACTION_MASK,
    hour_of,
    percentile_cols,
    prop,
)

NAME = "transaction_outcomes"
LONGEST_N = 50
#: A half pending longer than this is stuck (parameter ``stuck_after_s``).
STUCK_AFTER_S = 60
STATES = ("PENDING", "COMMITTED", "ROLLED_BACK", "DISCARDED")


def transform_half_states(records: DataFrame) -> DataFrame:
    """One row per half: its state at the end of the records, outcome, checks.

    The state is the last outcome (``d``), discard (``x``) or resume (``r``) op
    in log order; without any, a committed message naming the half means
    COMMITTED (decided by ``UNKNOWN``: its op was lost), else PENDING.
    """
    halves = records.where(
        (F.col("topic") == HALF_TOPIC) & (F.lower(prop("TRAN_MSG")) == "true")
    ).select(
        "node",
        F.col("physical_offset").alias("half_offset"),
        prop("UNIQ_KEY").alias("msg_id"),
        F.coalesce(prop("PGROUP"), F.lit("")).alias("producer_group"),
        F.coalesce(prop("REAL_TOPIC"), F.lit("")).alias("topic"),
        F.col("store_ts").alias("half_ts"),
    )
    ops = records.where(
        (F.col("topic") == OP_TOPIC) & prop("TRANS_OFFSET").isNotNull()
    ).select(
        "node",
        prop("TRANS_OFFSET").cast("long").alias("half_offset"),
        F.col("tags").alias("kind"),
        F.col("physical_offset").alias("op_offset"),
        F.col("store_ts").alias("op_ts"),
        prop("TRAN_OUTCOME").alias("outcome"),
        prop("TRAN_SOURCE").alias("source"),
    )
    decisive = F.col("kind").isin("d", "x", "r")
    last = F.struct(
        F.col("op_offset"), F.col("kind"), F.col("outcome"), F.col("source")
    )
    half = ["node", "half_offset"]
    per_half = ops.groupBy(*half).agg(
        F.max(F.when(decisive, last)).alias("last"),
        F.min(F.when(F.col("kind") == "d", F.col("op_ts"))).alias("outcome_ts"),
        F.sum(F.when(F.col("kind") == "c", 1).otherwise(0)).alias("checks"),
        F.sum(F.when(F.col("kind") == "x", 1).otherwise(0)).alias("discards"),
    )
    commits = (
        records.where(
            (F.col("sysflag").bitwiseAND(TRANSACTION_MASK) == TRANSACTION_COMMIT)
            & (F.col("prepared_offset") > 0)
        )
        .groupBy("node", F.col("prepared_offset").alias("half_offset"))
        .agg(F.min("store_ts").alias("commit_ts"))
    )
    kind = F.col("last.kind")
    state = (
        F.when((kind == "d") & (F.col("last.outcome") == "COMMIT"), "COMMITTED")
        .when(kind == "d", "ROLLED_BACK")
        .when(kind == "x", "DISCARDED")
        .when(kind == "r", "PENDING")
        .when(F.col("commit_ts").isNotNull(), "COMMITTED")
        .otherwise("PENDING")
    )
    final = F.col("state").isin("COMMITTED", "ROLLED_BACK")
    decided_by = F.when(kind == "d", F.coalesce(F.col("last.source"), F.lit("CLIENT")))
    return (
        halves.join(per_half, half, "left")
        .join(commits, half, "left")
        .withColumn("state", state)
        .select(
            "node",
            "half_offset",
            "msg_id",
            "producer_group",
            "topic",
            "half_ts",
            "state",
            F.when(final, F.coalesce(decided_by, F.lit("UNKNOWN"))).alias("decided_by"),
            F.when(final, F.coalesce("outcome_ts", "commit_ts")).alias("outcome_ts"),
            F.coalesce("checks", F.lit(0)).cast("long").alias("checks"),
            F.coalesce("discards", F.lit(0)).cast("long").alias("discards"),
        )
        .withColumn("outcome_ms", F.col("outcome_ts") - F.col("half_ts"))
    )


def transform_outcomes_hourly(
    half_states: DataFrame,
    now_ms: int | None = None,
    stuck_after_s: int = STUCK_AFTER_S,
) -> DataFrame:
    """Per producer group, topic and hour of the half: outcome counts and times;
    ``stuck``: halves still pending ``stuck_after_s`` after they were stored
    (at ``now_ms``; without it, none is counted)."""

    def count_of(cond):
        return F.sum(F.when(cond, 1).otherwise(0)).cast("long")

    state, by = F.col("state"), F.col("decided_by")
    if now_ms is None:
        stuck = F.lit(False)
    else:
        stuck = (state == "PENDING") & (
            F.lit(now_ms) - F.col("half_ts") > F.lit(stuck_after_s * 1000)
        )
    return (
        half_states.groupBy(
            "producer_group", "topic", hour_of(F.col("half_ts")).alias("hour")
        )
        .agg(
            F.count(F.lit(1)).alias("halves"),
            count_of(state == "COMMITTED").alias("commits"),
            count_of(state == "ROLLED_BACK").alias("rollbacks"),
            count_of(state == "DISCARDED").alias("discarded"),
            count_of(state == "PENDING").alias("pending"),
            count_of(stuck).alias("stuck"),
            count_of(F.col("discards") > 0).alias("ever_discarded"),
            count_of(by == "CLIENT").alias("by_client"),
            count_of(by == "CHECK").alias("by_check"),
            count_of(by == "OPERATOR").alias("by_operator"),
            count_of(by == "UNKNOWN").alias("by_unknown"),
            *percentile_cols("outcome_ms", "outcome_ms"),
            F.max("outcome_ms").alias("outcome_ms_max"),
            F.sum("checks").alias("checks"),
        )
        .orderBy("producer_group", "topic", "hour")
    )


def transform_check_counts(half_states: DataFrame) -> DataFrame:
    """Per producer group: how many halves were checked back 0, 1, 2... times."""
    return (
        half_states.groupBy("producer_group", "checks")
        .agg(F.count(F.lit(1)).alias("halves"))
        .orderBy("producer_group", "checks")
    )


def transform_longest_pending(
    half_states: DataFrame, now_ms: int, limit: int = LONGEST_N
) -> DataFrame:
    """The ``limit`` oldest halves still pending, oldest first (a discarded
    half is no longer pending: it is in the hourly ``discarded`` counts)."""
    return (
        half_states.where(F.col("state") == "PENDING")
        .orderBy("half_ts", "node", "half_offset")
        .limit(limit)
        .select(
            "msg_id",
            "node",
            "half_offset",
            "producer_group",
            "topic",
            "state",
            "half_ts",
            (F.lit(now_ms) - F.col("half_ts")).alias("age_ms"),
            "checks",
        )
    )


def run(records: DataFrame, params: dict) -> dict[str, DataFrame]:
    """Return the report's tables (the first is the main one)."""
    states = transform_half_states(records).cache()
    return {
        "hourly": transform_outcomes_hourly(
            states,
            int(params["now_ms"]),
            int(params.get("stuck_after_s", STUCK_AFTER_S)),
        ),
        "check_counts": transform_check_counts(states),
        "longest_pending": transform_longest_pending(
            states, int(params["now_ms"]), int(params.get("top_n", LONGEST_N))
        ),
        "halves": states,
    }


def summarize(tables: dict[str, DataFrame]) -> dict:
    """Return the small JSON summary of the report's tables."""
    states = tables["halves"]
    counts = {s: 0 for s in STATES}
    for row in states.groupBy("state").count().collect():
        counts[row["state"]] = int(row["count"])
    pct = states.agg(*percentile_cols("outcome_ms", "outcome_ms")).first()
    by = {
        r["decided_by"]: int(r["count"])
        for r in states.where(F.col("decided_by").isNotNull())
        .groupBy("decided_by")
        .count()
        .collect()
    }
    stuck = tables["hourly"].agg(F.sum("stuck")).first()[0]
    return {
        "halves": sum(counts.values()),
        "states": counts,
        "stuck": int(stuck or 0),
        "decided_by": by,
        **{k: pct[k] for k in pct.asDict()},
    }
