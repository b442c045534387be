"""The SparkSession the report jobs share: local[*] unless SPARK_MASTER says so."""

from __future__ import annotations

import logging
import os
import sys

from pyspark.sql import SparkSession


def get_session(
    master: str | None = None, app_name: str = "broker-reports"
) -> SparkSession:
    """Return a SparkSession tuned for small local runs (few partitions, no UI)."""
    master = master or os.environ.get("SPARK_MASTER", "local[*]")
    # Python workers must use this interpreter (the venv with broker_core).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config(
            "spark.sql.shuffle.partitions", "4" if master.startswith("local") else "200"
        )
        .config("spark.sql.session.timeZone", "UTC")
    )
    # py4j logs its connection teardown at INFO from __del__, after stdout
    # may already be closed at interpreter exit.
    logging.getLogger("py4j").setLevel(logging.WARNING)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    return session
