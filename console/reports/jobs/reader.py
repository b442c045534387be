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
from console.reports.jobs.errors import ReportInputError

cloudpickle.register_pickle_by_value(scan)
cloudpickle.register_pickle_by_value(columnar)

MANIFEST = "manifest.json"


@dataclass
class Decoded:
    """What ``decode_to_parquet`` wrote: records, and the damaged or
    quarantined stretches of the log stepped over (their records are lost)."""

    rows: int = 0
    skipped: int = 0
    skipped_bytes: int = 0


def decode_to_parquet(
    spark: SparkSession,
    store_dir: str | Path,
    out_dir: str | Path,
    range_bytes: int = scan.RANGE_BYTES,
    start_offset: int = 0,
    end_offset: int | None = None,
) -> Decoded:
    """Decode the log's ``[start_offset, end_offset)`` into Parquet files in
    ``out_dir``, one Spark task (and file) per byte range.

    ``end_offset`` defaults to the store's commit position. Executors write
    the files with pyarrow, so ``out_dir`` must be reachable from them; the
    rows the driver then finds there are checked against what they wrote.
    """
    ranges = scan.split_ranges(store_dir, range_bytes, start_offset, end_offset)
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    if not ranges:
        return Decoded()
    items = [(i, *r) for i, r in enumerate(ranges)]
    write = functools.partial(columnar.write_range_parquet, out_dir=str(out_dir))
    parts = spark.sparkContext.parallelize(items, len(items)).map(write).collect()
    done = Decoded(
        sum(p[0] for p in parts), sum(p[1] for p in parts), sum(p[2] for p in parts)
    )
    visible = visible_rows(out_dir)
    if visible != done.rows:
        raise ReportInputError(
            f"the executors wrote {done.rows:,} records under {out_dir} but this "
            f"process finds {visible:,} there: the export directory must be on "
            "storage the driver and every executor see at the same path"
        )
    return done


def visible_rows(directory: str | Path) -> int:
    """The records in a directory's Parquet parts, from their footers."""
    import pyarrow.parquet as pq

    return sum(
        pq.ParquetFile(f).metadata.num_rows
        for f in Path(directory).glob("part-*.parquet")
    )


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
) -> tuple[DataFrame, Decoded]:
    """Decode the whole log afresh into ``scratch_dir``; return its records
    and what was decoded."""
    shutil.rmtree(scratch_dir, ignore_errors=True)
    done = decode_to_parquet(spark, store_dir, scratch_dir, range_bytes)
    return read_parquet(spark, scratch_dir), done


@dataclass
class ExportResult:
    """What one ``export_log`` call did."""

    start: int
    end: int
    rows: int
    seconds: float
    rebuilt: bool
    chunks: int
    #: Damaged or quarantined stretches of the log in the whole export.
    skipped: int = 0
    skipped_bytes: int = 0

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
        if (
            manifest.get("store") != store
            or end < manifest["log_end"]
            or end == -1
            or not _chunks_intact(export_dir, manifest)
        ):
            # Another store's export, a log cut shorter, or chunks missing or
            # not what the manifest says (deleted, half written): start afresh.
            shutil.rmtree(export_dir / "chunks", ignore_errors=True)
            manifest = {"store": store, "log_end": 0, "chunks": []}
            rebuilt = True
        start = manifest["log_end"]
        rows = 0
        if end == -1 or end > start:
            name = f"{start:020d}-{max(end, 0):020d}"
            path = export_dir / "chunks" / name
            shutil.rmtree(path, ignore_errors=True)
            try:
                done = decode_to_parquet(
                    spark,
                    store_dir,
                    path,
                    range_bytes,
                    start,
                    None if end == -1 else end,
                )
            except BaseException:
                shutil.rmtree(path, ignore_errors=True)  # never half recorded
                raise
            rows = done.rows
            manifest["chunks"].append(
                {"name": name, "start": start, "end": end, "rows": rows,
                 "skipped": done.skipped, "skipped_bytes": done.skipped_bytes}
            )  # fmt: skip
            manifest["log_end"] = max(end, 0)
            _save_manifest(export_dir, manifest)
        return ExportResult(
            start,
            max(end, 0),
            rows,
            time.monotonic() - started,
            rebuilt,
            len(manifest["chunks"]),
            sum(c.get("skipped", 0) for c in manifest["chunks"]),
            sum(c.get("skipped_bytes", 0) for c in manifest["chunks"]),
        )


def _chunks_intact(export_dir: Path, manifest: dict) -> bool:
    """Whether every chunk the manifest lists holds the rows it says."""
    for c in manifest.get("chunks", []):
        path = export_dir / "chunks" / c["name"]
        if c.get("rows", 0) and (not path.is_dir() or visible_rows(path) != c["rows"]):
            return False
    return True


def read_export(spark: SparkSession, export_dir: str | Path) -> DataFrame:
    """Return every exported record (``RECORD_SCHEMA``)."""
    export_dir = Path(export_dir)
    chunks = [
        export_dir / "chunks" / c["name"] for c in _load_manifest(export_dir)["chunks"]
    ]
    return read_parquet(spark, *chunks)
