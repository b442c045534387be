"""Run reports over the log and store their results (Parquet + JSON summary).

No Django here: the console's service, the management command, the Celery
task and ``main()`` (spark-submit) all call ``run_reports``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType

from pyspark.sql import DataFrame, SparkSession

from console.reports.jobs import (
    consumer_lag,
    delay_punctuality,
    reader,
    scan,
    storage,
    topic_traffic,
    transaction_outcomes,
)

#: Report name -> module with ``run(records, params)`` and ``summarize(tables)``.
REPORTS: dict[str, ModuleType] = {
    m.NAME: m
    for m in (transaction_outcomes, delay_punctuality, topic_traffic, consumer_lag)
}
SUMMARY = "summary.json"


@dataclass
class ReportOutput:
    """Where a report's results went and what they hold."""

    name: str
    directory: str
    tables: dict[str, int]  # table -> rows
    summary: dict
    seconds: float
    params: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return asdict(self)


def load_records(
    spark: SparkSession,
    store_dir: str | Path,
    *,
    export_dir: str | Path | storage.Location | None = None,
    scratch_dir: str | Path | None = None,
    since_ms: int | None = None,
    until_ms: int | None = None,
    skip_damaged: bool = False,
) -> tuple[DataFrame, dict]:
    """Return the records in range and what was read.

    With ``export_dir`` (a directory or a URI) the Parquet export is brought up
    to date first and read (only new log bytes are decoded); without it the
    whole log is decoded afresh into ``scratch_dir``. Raises
    ``ReportInputError`` when there is no store at ``store_dir``, and when
    damaged or quarantined stretches of the log were stepped over unless
    ``skip_damaged`` (then ``info`` says how many).
    """
    from console.reports.jobs.common import transform_time_range
    from console.reports.jobs.errors import ReportInputError

    if not (Path(store_dir) / "commitlog").is_dir():
        raise ReportInputError(
            f"there is no store at {store_dir} (no commitlog directory): "
            "check BROKER_STORE_DIR"
        )
    _size_shuffles(spark, store_dir)
    if export_dir is not None:
        export = reader.export_log(spark, store_dir, export_dir)
        records = reader.read_export(spark, export_dir)
        info = {"source": "export", "export": export.as_dict(), "log_end": export.end}
        skipped, skipped_bytes = export.skipped, export.skipped_bytes
    else:
        if scratch_dir is None:
            raise ValueError("reading the log directly needs a scratch_dir")
        records, done = reader.read_log(spark, store_dir, scratch_dir)
        info = {"source": "log"}
        skipped, skipped_bytes = done.skipped, done.skipped_bytes
    info["skipped"], info["skipped_bytes"] = skipped, skipped_bytes
    if skipped and not skip_damaged:
        raise ReportInputError(
            f"{skipped} damaged or quarantined stretch(es) of the log "
            f"({skipped_bytes:,} bytes) could not be read: the records there are "
            f"missing. See `python -m broker_core verify {store_dir}` (and "
            "docs/store.md on repair), or run again skipping damaged records to "
            "report on the rest."
        )
    return transform_time_range(records, since_ms, until_ms), info


def _size_shuffles(spark: SparkSession, store_dir: str | Path) -> None:
    """On a cluster, shuffle partitions follow the input's size unless the
    operator set them (``SPARK_CONF_*``); local runs keep their few."""
    from console.reports.jobs.session import conf_from_env, shuffle_partitions

    if spark.sparkContext.master.startswith("local"):
        return
    if "spark.sql.shuffle.partitions" in conf_from_env():
        return
    size = scan.commit_position(store_dir)
    if size is None:  # no readable state: the segments' sizes, an upper bound
        size = sum(f.stat().st_size for f in scan.segment_files(store_dir))
    spark.conf.set("spark.sql.shuffle.partitions", str(shuffle_partitions(size)))


def run_report(
    spark: SparkSession,
    name: str,
    records: DataFrame,
    params: dict,
    out_dir: str | Path | storage.Location,
) -> ReportOutput:
    """Compute report ``name``, write each table as Parquet and the summary
    at ``out_dir`` (a local directory or a URI, see ``storage``)."""
    started = time.monotonic()
    module = REPORTS[name]
    out = out_dir if isinstance(out_dir, storage.Location) else storage.locate(out_dir)
    out.remove()
    out.makedirs()
    tables = module.run(records, params)
    written: dict[str, DataFrame] = {}
    rows: dict[str, int] = {}
    for table, df in tables.items():
        target = out.child(f"{table}.parquet")
        if out.local:
            df.repartition(1).write.parquet(target.path)
            written[table] = spark.read.parquet(target.path)
        else:
            write_parts_arrow(df.repartition(1), target)
            written[table] = reader.read_parquet(spark, target, schema=df.schema)
        rows[table] = written[table].count()
        df.unpersist()
    summary = module.summarize(written)
    output = ReportOutput(
        name,
        out.path if out.local else out.uri,
        rows,
        summary,
        time.monotonic() - started,
        {k: v for k, v in params.items() if isinstance(v, (int, str, float, list))},
    )
    out.write_text(SUMMARY, json.dumps(output.as_dict(), indent=1, default=str))
    return output


def write_parts_arrow(df: DataFrame, target: storage.Location) -> int:
    """Write ``df`` as ``part-<partition>.parquet`` files at ``target``, each
    by the executor holding the partition, through ``target``'s pyarrow
    filesystem (an object store: no Hadoop filesystem on the cluster). A
    partition without rows still writes its file, so the table keeps its
    schema. Returns the rows written."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema

    fs, base = target.fs, target.path
    schema = to_arrow_schema(df.schema, timezone="UTC")

    def write(batches):  # type: ignore[no-untyped-def]
        import pyarrow.parquet as pq
        from pyspark import TaskContext

        part = TaskContext.get().partitionId()  # type: ignore[union-attr]
        fs.create_dir(base, recursive=True)
        rows = 0
        with pq.ParquetWriter(
            f"{base}/part-{part:05d}.parquet", schema, filesystem=fs
        ) as writer:
            for batch in batches:
                writer.write_batch(batch)
                rows += batch.num_rows
        yield pa.RecordBatch.from_pydict({"rows": [rows]})

    return sum(r["rows"] for r in df.mapInArrow(write, "rows long").collect())


def default_params(store_dir: str | Path, now_ms: int | None = None) -> dict:
    """Return the parameters every report accepts, read from the store's config."""
    from broker_core.config import DEFAULT_DELAY_LEVELS, parse_delay_levels

    return {
        "store_dir": str(store_dir),
        "now_ms": now_ms if now_ms is not None else int(time.time() * 1000),
        "delay_levels_ms": parse_delay_levels(DEFAULT_DELAY_LEVELS),
        # No "top_n" here: each report has its own default (50 longest-pending
        # halves, 10 top tags and keys) unless a run asks for another.
    }


def _ms(text: str | None) -> int | None:
    if not text:
        return None
    dt = datetime.fromisoformat(text)
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return int(dt.timestamp() * 1000)


def main(argv: list[str] | None = None) -> int:
    """spark-submit entry point: run reports, print their summaries as JSON."""
    from console.reports.jobs.session import get_session

    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("names", nargs="*", default=list(REPORTS))
    ap.add_argument("--store", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--export", help="Parquet export directory (default: read log)")
    ap.add_argument("--since")
    ap.add_argument("--until")
    ap.add_argument("--master")
    args = ap.parse_args(argv)
    spark = get_session(args.master)
    records, _ = load_records(
        spark,
        args.store,
        export_dir=args.export,
        since_ms=_ms(args.since),
        until_ms=_ms(args.until),
    )
    params = default_params(args.store)
    for name in args.names:
        output = run_report(spark, name, records, params, Path(args.out) / name)
        print(json.dumps(output.as_dict(), default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
