"""Read the commit log into Spark: directly (ranges decoded in parallel) or
through the incremental Parquet export that the report runs keep current.

Executors receive ``scan``, ``columnar`` and ``storage`` by value
(cloudpickle), so they import only ``broker_core`` and ``pyarrow``: never
Django, never this package.

The export lives at a ``storage.Location``: a local directory or a URI
(``s3://``, ``hdfs://``, ...). Who decodes the log: the log is on the broker
host, so with a local master Spark's tasks decode it (one byte range each,
column-wise, ``columnar``); with a cluster, the broker host decodes the new
ranges itself (a process per core) and writes them to the export, and the
executors read only the export. Local exports are read by Spark's own Parquet
reader (no per-row Python-to-JVM conversion); exports elsewhere are read by
the executors through ``pyarrow.fs`` and handed to Spark as Arrow batches, so
no Hadoop filesystem jars are needed on the cluster.
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import json
import multiprocessing
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from pyspark import cloudpickle
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType

from broker_core.config import saved_geometry, store_id
from console.reports.jobs import columnar, scan, storage
from console.reports.jobs.common import LOG_SCHEMA, SINGLE_NODE, with_node
from console.reports.jobs.errors import ReportInputError
from console.reports.jobs.storage import Location

cloudpickle.register_pickle_by_value(scan)
cloudpickle.register_pickle_by_value(columnar)
cloudpickle.register_pickle_by_value(storage)

Where = str | os.PathLike[str] | Location


def _loc(where: Where) -> Location:
    return where if isinstance(where, Location) else storage.locate(where)


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
    out: Where,
    range_bytes: int = scan.RANGE_BYTES,
    start_offset: int = 0,
    end_offset: int | None = None,
) -> Decoded:
    """Decode the log's ``[start_offset, end_offset)`` into Parquet files at
    ``out``, one file per byte range.

    ``end_offset`` defaults to the store's commit position. With a local
    master Spark's tasks decode and write; otherwise this host does (the
    executors may not see the log). The rows then found at ``out`` are checked
    against what was written.
    """
    out = _loc(out)
    if end_offset is None:
        end_offset = scan.commit_position(store_dir)
    exact = end_offset is not None
    why = scan.position_problem(store_dir, end_offset)
    if why is not None:
        raise ReportInputError(
            f"{why}. Run `python -m broker_core verify --repair` on the store"
        )
    if end_offset is not None:
        size = saved_geometry(store_dir).get("segment_size")
        gaps = scan.segment_gaps(store_dir, end_offset, size) if size else []
        if gaps:
            raise ReportInputError(
                "the commit log is incomplete: "
                + "; ".join(gaps[:3])
                + ". Run `python -m broker_core verify` on the store"
            )
    ranges = scan.split_ranges(store_dir, range_bytes, start_offset, end_offset)
    out.makedirs()
    if not ranges:
        return Decoded()
    items = [(i, *r) for i, r in enumerate(ranges)]
    write = functools.partial(
        columnar.write_range_parquet,
        out_dir=out.path,
        filesystem=out.fs,
        exact_end=exact,
    )
    if spark.sparkContext.master.startswith("local"):
        parts = spark.sparkContext.parallelize(items, len(items)).map(write).collect()
    else:
        parts = _decode_here(write, items)
    done = Decoded(
        sum(p[0] for p in parts), sum(p[1] for p in parts), sum(p[2] for p in parts)
    )
    if exact:
        for gap in _gaps_between(ranges, parts):
            done.skipped += 1
            done.skipped_bytes += gap
    visible = visible_rows(out)
    if visible != done.rows:
        raise ReportInputError(
            f"{done.rows:,} records were written to {out.uri} but {visible:,} "
            "are found there: the export must be on storage every process of "
            "the run reaches at the same address (an object store URI, or a "
            "directory shared at the same path)"
        )
    return done


def _gaps_between(ranges: list[scan.LogRange], parts: list[Any]) -> list[int]:
    """Return the damaged stretches no range accounted for: bytes between where
    one range's records reach and where the next range's first record starts
    (within a segment; a range decodes from its first record boundary, so
    damage at its start is seen only here)."""
    gaps: list[int] = []
    covered = -1
    path = None
    for rng, part in zip(ranges, parts, strict=True):
        first, reach = part[3], part[4]
        if rng.path != path:
            path, covered = rng.path, rng.start
        if first > covered:
            gaps.append(first - covered)
        covered = max(covered, reach)
    return gaps


def _decode_here(write: Any, items: list[tuple]) -> list[Any]:
    """Run ``write`` over ``items`` in a process per core on this host."""
    workers = min(len(items), os.cpu_count() or 1)
    if workers == 1:
        return [write(item) for item in items]
    # spawn: this process runs py4j threads that a fork would copy mid-state.
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(workers, mp_context=context) as pool:
        return list(pool.map(write, items))


def visible_rows(directory: Where) -> int:
    """The records in a directory's Parquet parts, from their footers."""
    import pyarrow.parquet as pq

    loc = _loc(directory)
    total = 0
    for path in loc.parts():
        with loc.fs.open_input_file(path) as f:
            total += pq.ParquetFile(f).metadata.num_rows
    return total


def read_parquet(
    spark: SparkSession, *dirs: Where, schema: StructType = LOG_SCHEMA
) -> DataFrame:
    """Return the rows in Parquet directories (default: decoded records,
    without their node)."""
    locations = [_loc(d) for d in dirs]
    found = [(loc, path) for loc in locations for path in loc.parts()]
    if not found:
        return spark.createDataFrame([], schema)
    if all(loc.local for loc, _ in found):
        return spark.read.schema(schema).parquet(*(path for _, path in found))
    return read_parts_arrow(spark, found[0][0].fs, [p for _, p in found], schema)


def read_parts_arrow(
    spark: SparkSession, fs: Any, paths: list[str], schema: StructType
) -> DataFrame:
    """Rows of Parquet files that the executors read through ``fs`` (a
    pyarrow filesystem, e.g. an object store): one task per file."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema

    arrow_schema = to_arrow_schema(schema, timezone="UTC")

    def read(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow.parquet as pq

        for batch in batches:
            for path in batch.column(0).to_pylist():
                with fs.open_input_file(path) as f:
                    for part in pq.ParquetFile(f).iter_batches(65536):
                        yield pa.RecordBatch.from_arrays(
                            [
                                part.column(i).cast(arrow_schema.field(i).type)
                                for i in range(len(arrow_schema))
                            ],
                            schema=arrow_schema,
                        )

    files = spark.createDataFrame([(p,) for p in paths], "path string")
    return files.repartition(len(paths)).mapInArrow(read, schema)


def read_log(
    spark: SparkSession,
    store_dir: str | Path,
    scratch_dir: str | Path,
    range_bytes: int = scan.RANGE_BYTES,
    node: str = SINGLE_NODE,
) -> tuple[DataFrame, Decoded]:
    """Decode the whole log afresh into ``scratch_dir``; return its records
    (``RECORD_SCHEMA``, of ``node``) and what was decoded."""
    shutil.rmtree(scratch_dir, ignore_errors=True)
    done = decode_to_parquet(spark, store_dir, scratch_dir, range_bytes)
    return with_node(read_parquet(spark, scratch_dir), node), done


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


def load_manifest(export: Location) -> dict:
    try:
        text = export.read_text(MANIFEST)
        return json.loads(text) if text is not None else {"log_end": 0, "chunks": []}
    except (OSError, ValueError):
        return {"log_end": 0, "chunks": []}


def _lock_path(export: Location) -> str:
    """The lock serialising exports: beside a local export; for one elsewhere,
    on this host (one broker host writes one export)."""
    if export.local:
        return os.path.join(export.path, ".lock")
    digest = hashlib.sha1(export.uri.encode()).hexdigest()[:16]
    return os.path.join(tempfile.gettempdir(), f"broker-reports-export-{digest}.lock")


def export_log(
    spark: SparkSession,
    store_dir: str | Path,
    export_dir: Where,
    range_bytes: int = scan.RANGE_BYTES,
    extra: dict | None = None,
) -> ExportResult:
    """Append the log records not yet exported to the Parquet export.

    Each call decodes ``[exported end, commit position)`` into a new chunk, so
    sealed data is decoded once. A log shorter than the export (cut by crash
    recovery) or another store's export starts the export afresh. Calls are
    serialised by a lock file (Celery task and report runs may overlap). The
    manifest lists a chunk only once its rows are readable where it was
    written. Every call rewrites the manifest with ``exported_at`` (epoch ms:
    how current the export is, read by runs on other hosts) and ``extra``'s
    entries.
    """
    started = time.monotonic()
    export = _loc(export_dir)
    export.makedirs()
    with open(_lock_path(export), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        manifest = load_manifest(export)
        store = str(Path(store_dir).resolve())
        identity = store_id(store_dir)
        segment_size = saved_geometry(store_dir).get("segment_size", 1 << 30)
        end = scan.commit_position(store_dir)
        rebuilt = False
        if end is None:
            # No readable state: decode to the first zeros, every time.
            end = -1
        if (
            manifest.get("store") != store
            or manifest.get("store_id") != identity
            or end < manifest["log_end"]
            or end == -1
            or manifest.get("tail")
            != scan.log_fingerprint(store_dir, manifest["log_end"], segment_size)
            or not chunks_intact(export, manifest)
            or (
                # New log to add: it must start at a record (nothing new: the
                # end is no record's start, and is current).
                end > manifest["log_end"]
                and not scan.is_boundary(store_dir, manifest["log_end"], segment_size)
            )
        ):
            # Another store's export (another path or id, or a log that is not
            # the exported one grown: its bytes before the exported end
            # differ), a log cut shorter, or chunks missing, unreadable or not
            # what the manifest says (deleted, half written), or an end that
            # is no record's start (a damaged state file's): start afresh.
            export.child("chunks").remove()
            manifest = {"store": store, "store_id": identity, "log_end": 0,
                        "tail": 0, "chunks": []}  # fmt: skip
            rebuilt = True
        start = manifest["log_end"]
        rows = 0
        if end == -1 or end > start:
            name = f"{start:020d}-{max(end, 0):020d}"
            chunk = export.child("chunks", name)
            chunk.remove()
            try:
                done = decode_to_parquet(
                    spark,
                    store_dir,
                    chunk,
                    range_bytes,
                    start,
                    None if end == -1 else end,
                )
            except BaseException:
                chunk.remove()  # never half recorded
                raise
            rows = done.rows
            manifest["chunks"].append(
                {"name": name, "start": start, "end": end, "rows": rows,
                 "skipped": done.skipped, "skipped_bytes": done.skipped_bytes}
            )  # fmt: skip
            manifest["log_end"] = max(end, 0)
            manifest["tail"] = scan.log_fingerprint(
                store_dir, manifest["log_end"], segment_size
            )
        # The ranges the store lists as gone (not in any chunk: nothing in
        # the log marks them), as of now.
        manifest["lost"] = scan.lost_ranges(store_dir)
        manifest.update(extra or {})
        manifest["exported_at"] = int(time.time() * 1000)
        export.write_text(MANIFEST, json.dumps(manifest, indent=1))
        return ExportResult(
            start,
            max(end, 0),
            rows,
            time.monotonic() - started,
            rebuilt,
            len(manifest["chunks"]),
            sum(c.get("skipped", 0) for c in manifest["chunks"])
            + len(manifest["lost"]),
            sum(c.get("skipped_bytes", 0) for c in manifest["chunks"])
            + sum(n for _o, n in manifest["lost"]),
        )


def discard_export(export_dir: Where) -> None:
    """Drop the export's chunks and manifest: the next ``export_log`` builds it
    afresh from the log (a chunk Spark could not decode)."""
    export = _loc(export_dir)
    with open(_lock_path(export), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        export.child("chunks").remove()
        export.write_text(MANIFEST, json.dumps({"log_end": 0, "chunks": []}))


def exported_rows(export_dir: Where) -> int | None:
    """The records the export's manifest lists; None without a readable one."""
    try:
        text = _loc(export_dir).read_text(MANIFEST)
        manifest = json.loads(text) if text is not None else None
    except (OSError, ValueError, storage.StorageError):
        return None
    if manifest is None:
        return None
    return sum(int(c.get("rows", 0)) for c in manifest.get("chunks", []))


def chunks_intact(export: Location, manifest: dict) -> bool:
    """Whether every chunk the manifest lists holds the rows it says."""
    for c in manifest.get("chunks", []):
        chunk = export.child("chunks", c["name"])
        try:
            if c.get("rows", 0) and visible_rows(chunk) != c["rows"]:
                return False
        except (OSError, ValueError):  # a footer pyarrow cannot read
            return False
    return True


def read_export(
    spark: SparkSession,
    export_dir: Where,
    node: str = SINGLE_NODE,
    manifest: dict | None = None,
) -> DataFrame:
    """Return every exported record (``RECORD_SCHEMA``, of ``node``): of the
    chunks ``manifest`` lists (default: the export's manifest now)."""
    export = _loc(export_dir)
    if manifest is None:
        manifest = load_manifest(export)
    names = [c["name"] for c in manifest["chunks"]]
    chunks = [export.child("chunks", name) for name in names]
    return with_node(read_parquet(spark, *chunks), node)
