"""The SparkSession the report jobs share.

``local[*]`` unless told otherwise (``SPARK_MASTER``). Local runs use few
shuffle partitions and no UI. On a cluster the executors need ``broker_core``
and ``pyarrow`` only: ``broker_core`` is zipped and shipped with the job.
"""

from __future__ import annotations

import logging
import os
import sys
import tempfile
import zipfile
from pathlib import Path

from pyspark.sql import SparkSession

import broker_core

#: The directory holding ``broker_core`` and ``console`` (the project root).
PROJECT_ROOT = Path(broker_core.__file__).resolve().parent.parent


def _broker_core_zip() -> str:
    """Return a zip of the ``broker_core`` package, for executors on other hosts."""
    target = Path(tempfile.gettempdir()) / f"broker_core-{os.getpid()}.zip"
    pkg = PROJECT_ROOT / "broker_core"
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as zf:
        for path in pkg.rglob("*.py"):
            zf.write(path, path.relative_to(PROJECT_ROOT))
    return str(target)


def get_session(
    master: str | None = None,
    app_name: str = "broker-reports",
    driver_memory: str | None = None,
) -> SparkSession:
    """Return the (shared) SparkSession for the reports."""
    master = master or os.environ.get("SPARK_MASTER") or "local[*]"
    local = master.startswith("local")
    # Python workers must use this interpreter and find broker_core.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    paths = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    if str(PROJECT_ROOT) not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join(
            [str(PROJECT_ROOT), *[p for p in paths if p]]
        )
    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false" if local else "true")
        .config("spark.sql.shuffle.partitions", "4" if local else "200")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", driver_memory or "3g")
        .config("spark.sql.parquet.compression.codec", "zstd")
    )
    # py4j logs its connection teardown at INFO from __del__, after stdout
    # may already be closed at interpreter exit.
    logging.getLogger("py4j").setLevel(logging.WARNING)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    if not local:
        session.sparkContext.addPyFile(_broker_core_zip())
    return session
