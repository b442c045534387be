"""What a report run's failure says: whether Spark found the export damaged,
the text a failed run stores, and the epoch milliseconds the jobs take."""

from __future__ import annotations

import traceback
from datetime import datetime


def ms(value: datetime | None) -> int | None:
    """``value`` in epoch milliseconds (None stays None)."""
    return None if value is None else int(value.timestamp() * 1000)


#: What Spark's Parquet reader says of a file it cannot decode.
_PARQUET_DAMAGE = (
    "ParquetDecodingException",
    "Couldn't deserialize thrift",
    "is not a Parquet file",
    "CorruptedParquet",
    "Could not read footer",
    "can not read class org.apache.parquet",
)


def export_damaged(exc: BaseException) -> bool:
    """Whether a run failed because a Parquet file of the export is damaged.

    Spark's errors reach Python as text only (a JVM exception wrapped by
    py4j), so this is the one place that reads an error's message."""
    text = str(exc)
    return any(marker in text for marker in _PARQUET_DAMAGE)


def describe_error(exc: BaseException) -> str:
    """What a failed run stores: a Spark (JVM) error once, cut to its first
    lines (its Java stack is already in the message); any other error with
    the last frames of its Python traceback."""
    text = str(exc).strip()
    if type(exc).__module__.startswith(("py4j", "pyspark")):
        lines = [line for line in text.splitlines() if line.strip()]
        head = "\n".join(lines[:12])
        more = f"\n... ({len(lines) - 12} more lines in the worker's log)"
        return f"{type(exc).__name__}: {head}{more if len(lines) > 12 else ''}"
    return f"{type(exc).__name__}: {text}\n{traceback.format_exc(-3)}"
