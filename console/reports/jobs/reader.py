"""Read the commit log into Spark: directly (ranges decoded in parallel) or
through the incremental Parquet export that the report runs keep current.

Executors receive ``scan`` and ``columnar`` by value (cloudpickle), so they
import only ``broker_core`` and ``pyarrow``: never Django, never this package.
Each task decodes one byte range column-wise (``columnar``) and writes it as a
Parquet file with pyarrow; Spark's JVM then reads the files (no per-row
Python-to-JVM conversion, no pandas).
"""

from __future__ import annotations

import fcntl
import functools
import json
import os
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from pyspark import cloudpickle
from pyspark.sql import DataFrame, SparkSession

from console.reports.jobs import columnar, scan
from console.reports.jobs.common import RECORD_SCHEMA

cloudpickle.register_pickle_by_value(scan)
cloudpickle.register_pickle_by_value(columnar)

MANIFEST = "manifest.json"


def decode_to_parquet(
    spark: SparkSession,
    store_dir: str | Path,
    out_dir: str | Path,
    range_bytes: int = scan.RANGE_BYTES,
    start_offset: int = 0,
    end_offset: int | None = None,
) -> int:
    """Decode the log's ``[start_offset, end_offset)`` into Parquet files in
    ``out_dir``, one Spark task (and file) per byte range; return the rows.

    ``end_offset`` defaults to the store's commit position. Executors write
    the files with pyarrow, so ``out_dir`` must be reachable from them.
    """
    ranges = scan.split_ranges(store_dir, range_bytes, start_offset, end_offset)
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    if not ranges:
        return 0
    items = [(i, *r) for i, r in enumerate(ranges)]
    write = functools.partial(columnar.write_range_parquet, out_dir=str(out_dir))
    return sum(spark.sparkContext.parallelize(items, len(items)).map(write).collect())


def read_parquet(spark: SparkSession, *paths: str | Path) -> DataFrame:
    """Return the records in decoded Parquet directories (``RECORD_SCHEMA``)."""
    files = [str(f) for p in paths for f in sorted(Path(p).glob("part-*.parquet"))]
    if not files:
        return spark.createDataFrame([], RECORD_SCHEMA)
    return spark.read.schema(RECORD_SCHEMA).parquet(*files)


def read_log(
    spark: SparkSession,
    store_dir: str | Path,
    scratch_dir: str | Path,
    range_bytes: int = scan.RANGE_BYTES,
) -> DataFrame:
    """Decode the whole log afresh into ``scratch_dir`` and return its records."""
    shutil.rmtree(scratch_dir, ignore_errors=True)
    decode_to_parquet(spark, store_dir, scratch_dir, range_bytes)
    return read_parquet(spark, scratch_dir)


@dataclass
class ExportResult:
    """What one ``export_log`` call did."""

    start: int
    end: int
    rows: int
    seconds: float
    rebuilt: bool
    chunks: int

    def as_dict(self) -> dict:
        return asdict(self)


def _load_manifest(export_dir: Path) -> dict:
    try:
        return json.loads((export_dir / MANIFEST).read_text())
    except (OSError, ValueError):
        return {"log_end": 0, "chunks": []}


def _save_manifest(export_dir: Path, manifest: dict) -> None:
    tmp = export_dir / (MANIFEST + ".tmp")
    tmp.write_text(json.dumps(manifest, indent=1))
    os.replace(tmp, export_dir / MANIFEST)


def export_log(
    spark: SparkSession,
    store_dir: str | Path,
    export_dir: str | Path,
    range_bytes: int = scan.RANGE_BYTES,
) -> ExportResult:
    """Append the log records not yet exported to the Parquet export.

    Each call decodes ``[exported end, commit position)`` into a new chunk, so
    sealed data is decoded once. A log shorter than the export (cut by crash
    recovery) or another store's export starts the export afresh. Calls are
    serialised by a lock file (Celery task and report runs may overlap).
    """
    started = time.monotonic()
    export_dir = Path(export_dir)
    export_dir.mkdir(parents=True, exist_ok=True)
    with open(export_dir / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        manifest = _load_manifest(export_dir)
        store = str(Path(store_dir).resolve())
        end = scan.commit_position(store_dir)
        rebuilt = False
        if end is None:
            # No readable state: decode to the first zeros, every time.
            end = -1
        if manifest.get("store") != store or end < manifest["log_end"] or end == -1:
            shutil.rmtree(export_dir / "chunks", ignore_errors=True)
            manifest = {"store": store, "log_end": 0, "chunks": []}
            rebuilt = True
        start = manifest["log_end"]
        rows = 0
        if end == -1 or end > start:
            name = f"{start:020d}-{max(end, 0):020d}"
            path = export_dir / "chunks" / name
            shutil.rmtree(path, ignore_errors=True)
            rows = decode_to_parquet(
                spark, store_dir, path, range_bytes, start, None if end == -1 else end
            )
            manifest["chunks"].append(
                {"name": name, "start": start, "end": end, "rows": rows}
            )
            manifest["log_end"] = max(end, 0)
            _save_manifest(export_dir, manifest)
        return ExportResult(
            start,
            max(end, 0),
            rows,
            time.monotonic() - started,
            rebuilt,
            len(manifest["chunks"]),
        )


def read_export(spark: SparkSession, export_dir: str | Path) -> DataFrame:
    """Return every exported record (``RECORD_SCHEMA``)."""
    export_dir = Path(export_dir)
    chunks = [
        export_dir / "chunks" / c["name"] for c in _load_manifest(export_dir)["chunks"]
    ]
    return read_parquet(spark, *chunks)
