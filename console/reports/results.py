"""A run's result tables, read with pyarrow only (no JVM in web processes):
whole tables, pages of rows, and CSV, JSON lines and Parquet downloads."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

from console.reports.jobs import storage
from console.reports.models import ReportRun


def locate_results(run: ReportRun) -> Any:
    """The ``storage.Location`` of a run's results (a directory or a URI)."""
    return storage.locate(run.result_dir)


def _read(run: ReportRun, table: str) -> Any:
    """A whole result table (``pyarrow.Table``), wherever the results live."""
    import pyarrow.parquet as pq

    if not run.result_dir or table not in (run.rows or {}):
        raise FileNotFoundError(f"run {run.pk} has no table {table!r}")
    where = locate_results(run).child(f"{table}.parquet")
    return pq.read_table(where.path, filesystem=where.fs)


def _cell(value: Any) -> Any:
    if isinstance(value, datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        return value.isoformat(timespec="seconds")
    return value


def read_arrow(run: ReportRun, table: str) -> Any:
    """The whole result table as a ``pyarrow.Table`` (charts aggregate it)."""
    return _read(run, table)


def read_table(
    run: ReportRun, table: str, limit: int = 200, offset: int = 0
) -> tuple[list[str], list[list[Any]]]:
    """Return the column names and up to ``limit`` rows of a result table."""
    data = _read(run, table)
    part = data.slice(offset, limit).to_pylist()
    columns = data.column_names
    return columns, [[_cell(row[c]) for c in columns] for row in part]


def table_csv(run: ReportRun, table: str) -> Iterator[str]:
    """Yield a result table as CSV text, a batch of rows at a time."""
    data = _read(run, table)
    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow(data.column_names)
    for batch in data.to_batches(max_chunksize=5000):
        for row in batch.to_pylist():
            writer.writerow([_cell(v) for v in row.values()])
        yield buf.getvalue()
        buf.seek(0)
        buf.truncate()
    yield buf.getvalue()


def table_json(run: ReportRun, table: str) -> Iterator[str]:
    """Yield a result table as JSON lines (one object per row; times as ISO
    8601 with their zone), a batch of rows at a time."""
    data = _read(run, table)
    for batch in data.to_batches(max_chunksize=5000):
        yield "".join(
            json.dumps({k: _cell(v) for k, v in row.items()}, default=str) + "\n"
            for row in batch.to_pylist()
        )


def table_parquet(run: ReportRun, table: str) -> bytes:
    """A result table as one Parquet file (zstd), its types kept."""
    import pyarrow.parquet as pq

    buf = io.BytesIO()
    pq.write_table(_read(run, table), buf, compression="zstd")
    return buf.getvalue()
