"""Run reports over the log and store their results (Parquet + JSON summary).

No Django here: the console's service, the management command, the Celery
task and ``main()`` (spark-submit) all call ``run_reports``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Iterable
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
        lost = scan.lost_ranges(store_dir)
        skipped = done.skipped + len(lost)
        skipped_bytes = done.skipped_bytes + sum(n for _o, n in lost)
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


def _size_shuffles(
    spark: SparkSession, store_dir: str | Path | None, size: int | None = None
) -> None:
    """On a cluster, shuffle partitions follow the input's size (``size``
    bytes of log, or the store's) unless the operator set them
    (``SPARK_CONF_*``); local runs keep their few."""
    from console.reports.jobs.session import conf_from_env, shuffle_partitions

    if spark.sparkContext.master.startswith("local"):
        return
    if "spark.sql.shuffle.partitions" in conf_from_env():
        return
    if size is None and store_dir is not None:
        size = scan.commit_position(store_dir)
        if size is None:  # no readable state: the segments' sizes, an upper bound
            size = sum(f.stat().st_size for f in scan.segment_files(store_dir))
    spark.conf.set("spark.sql.shuffle.partitions", str(shuffle_partitions(size or 0)))


def load_node_records(
    spark: SparkSession,
    export_root: str | Path | storage.Location,
    *,
    node: str | None = None,
    expected: Iterable[str] = (),
    own_node: str = "",
    store_dir: str | Path | None = None,
    since_ms: int | None = None,
    until_ms: int | None = None,
    skip_damaged: bool = False,
    max_age_ms: int,
    now_ms: int | None = None,
) -> tuple[DataFrame, dict]:
    """Return the records of a cluster's node exports under ``export_root``
    and what was read: of ``node`` alone, or (None) of every node
    ``expected`` or found there.

    ``own_node`` names this host's node: its export (``store_dir``'s log) is
    brought up to date first. Every other export is read as its host left it;
    ``info["offsets"]`` is a DataFrame of their committed offsets
    (``consumer_lag.OFFSETS_SCHEMA``). Raises ``ReportInputError`` when there
    is no node, when a node's export is missing, stale (``max_age_ms``) or
    incomplete (``nodes.check_export``), and on damaged stretches of a node's
    log unless ``skip_damaged``.
    """
    from console.reports.jobs import nodes
    from console.reports.jobs.common import transform_time_range
    from console.reports.jobs.consumer_lag import OFFSETS_SCHEMA
    from console.reports.jobs.errors import ReportInputError

    root = (
        export_root
        if isinstance(export_root, storage.Location)
        else storage.locate(export_root)
    )
    now_ms = now_ms if now_ms is not None else int(time.time() * 1000)
    if own_node and (node is None or node == own_node):
        if store_dir is None or not (Path(store_dir) / "commitlog").is_dir():
            raise ReportInputError(
                f"there is no store at {store_dir} (no commitlog directory) for "
                f"this host's node {own_node}: check BROKER_STORE_DIR"
            )
        nodes.export_node(spark, store_dir, root, own_node)
    if node is not None:
        names = [nodes.check_name(node)]
    else:
        # The nodes the console names (CLUSTER_NODES), else every node that
        # exported: a node retired from the list keeps its old export in the
        # object store, which must not fail every run as stale.
        names = sorted(
            ({*expected, own_node} if expected else {*nodes.find_nodes(root), own_node})
            - {""}
        )
    if not names:
        raise ReportInputError(
            f"no node has exported to {root.uri} yet (each node's host exports "
            "there: task reports.export on the worker with BROKER_NODE=<name>)"
        )
    needed_ms = min(until_ms, now_ms) if until_ms is not None else now_ms
    exports = [
        nodes.check_export(root, name, needed_ms=needed_ms, max_age_ms=max_age_ms)
        for name in names
    ]
    damaged = [(e.node, *e.skipped) for e in exports if e.skipped[0]]
    skipped = sum(d[1] for d in damaged)
    skipped_bytes = sum(d[2] for d in damaged)
    if damaged and not skip_damaged:
        where = "; ".join(f"node {n}: {k} ({b:,} bytes)" for n, k, b in damaged)
        raise ReportInputError(
            f"damaged or quarantined stretches of the log could not be read "
            f"({where}): the records there are missing. See `python -m "
            "broker_core verify` on that node's store (and docs/store.md on "
            "repair), or run again skipping damaged records to report on the rest."
        )
    log_end = sum(int(e.manifest.get("log_end", 0)) for e in exports)
    _size_shuffles(spark, None, log_end)
    info = {
        "source": "nodes",
        "nodes": {e.node: e.describe() for e in exports},
        "log_end": log_end,
        "records": sum(e.rows for e in exports),
        "skipped": skipped,
        "skipped_bytes": skipped_bytes,
        "offsets": spark.createDataFrame(nodes.offsets_rows(exports), OFFSETS_SCHEMA),
    }
    records = nodes.read_nodes(spark, exports)
    return transform_time_range(records, since_ms, until_ms), info


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


def summarize_report(name: str, records: DataFrame, params: dict) -> dict:
    """Report ``name``'s summary over ``records``, its tables computed but not
    written (the previous period a run is compared with)."""
    module = REPORTS[name]
    tables = module.run(records, params)
    try:
        return module.summarize(tables)
    finally:
        for df in tables.values():
            df.unpersist()


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
