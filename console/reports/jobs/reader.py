"""Decode the commit log into a DataFrame, one segment per Spark task.

Executors import only ``broker_core.logscan``, never Django.
A segment is decoded whole: records never span segments, so a segment is the
natural record-aligned split.
"""

from __future__ import annotations

from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as T

from broker_core.logscan import segment_paths, segment_rows

SCHEMA = T.StructType(
    [
        T.StructField("topic", T.StringType(), False),
        T.StructField("queue_id", T.IntegerType(), False),
        T.StructField("queue_offset", T.LongType(), False),
        T.StructField("physical_offset", T.LongType(), False),
        T.StructField("sysflag", T.IntegerType(), False),
        T.StructField("born_ts", T.LongType(), False),
        T.StructField("store_ts", T.LongType(), False),
        T.StructField("body_size", T.IntegerType(), False),
        T.StructField("tags", T.StringType(), True),
        T.StructField("keys", T.StringType(), True),
        T.StructField("properties", T.MapType(T.StringType(), T.StringType()), False),
    ]
)


def read_commit_log(spark: SparkSession, store_dir: str | Path) -> DataFrame:
    """Return every record of the store's commit log as a DataFrame of SCHEMA."""
    paths = segment_paths(store_dir)
    rdd = spark.sparkContext.parallelize(paths, max(1, len(paths))).flatMap(
        segment_rows
    )
    return spark.createDataFrame(rdd, SCHEMA)
