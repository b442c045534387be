"""Scan commit-log segment files into plain row tuples, for analytics jobs.

Pure and dependency-free so that Spark executors (or a multiprocessing pool)
can import it without Django: each call decodes one whole segment, since
records never span segments.
"""

from __future__ import annotations

import mmap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from broker_core.record import decode_buffer

#: The order of the fields in each row ``segment_rows`` yields.
ROW_FIELDS = (
    "topic",
    "queue_id",
    "queue_offset",
    "physical_offset",
    "sysflag",
    "born_ts",
    "store_ts",
    "body_size",
    "tags",
    "keys",
    "properties",
)


def segment_paths(store_dir: str | Path) -> list[str]:
    """Return the store's commit-log segment files in offset order."""
    return sorted(str(p) for p in (Path(store_dir) / "commitlog").glob("[0-9]" * 20))


def segment_rows(path: str) -> Iterator[tuple[Any, ...]]:
    """Yield one ``ROW_FIELDS`` tuple per record of the segment file ``path``."""
    base = int(Path(path).name)
    with open(path, "rb") as fh:
        if Path(path).stat().st_size == 0:
            return
        with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            for msg in decode_buffer(memoryview(buf), base):
                yield (
                    msg.topic,
                    msg.queue_id,
                    msg.queue_offset,
                    msg.commit_log_offset,
                    msg.sysflag,
                    msg.born_timestamp,
                    msg.store_timestamp,
                    len(msg.body),
                    msg.tags,
                    msg.keys,
                    dict(msg.properties),
                )
