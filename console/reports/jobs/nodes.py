"""Exports of a cluster's nodes: each under ``<export>/<node>/``, read together.

Each broker node's host exports its own log to the shared export location
(``REPORTS_EXPORT_URI``, an object store) under its name, with a manifest of
its own and a copy of its committed consumer offsets: the host that runs a
report cannot read another node's store. A run reads every node's export (the
cluster) or one node's, each record tagged with its node. A node whose
manifest is missing or stale, or lists chunks that are not there, fails the
run with the reason: a run cannot rebuild another host's export, and a report
that silently left a node out would understate the cluster.

A single host (no node name) keeps its export at ``<export>`` itself, the
layout from before nodes, so an existing export stays valid.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pyarrow.fs as pafs
from pyspark.sql import DataFrame, SparkSession

from console.reports.jobs import reader, scan
from console.reports.jobs.common import RECORD_SCHEMA, SINGLE_NODE
from console.reports.jobs.consumer_lag import read_offsets
from console.reports.jobs.errors import ReportInputError
from console.reports.jobs.storage import Location, StorageError

#: A node's name is a directory name under the export: the broker names of
#: RocketMQ (``broker-a``), nothing that could climb out of the prefix.
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}\Z")
#: Names the single-host layout already uses at the export's root.
RESERVED = frozenset({"chunks"})


def check_name(node: str) -> str:
    """Return ``node`` if it can name a node's export, else raise ValueError."""
    if not NAME_RE.match(node) or node in RESERVED:
        raise ValueError(
            f"bad node name {node!r}: letters, digits, '.', '_' and '-' (at most "
            f"64, starting with a letter or digit), not {', '.join(RESERVED)}"
        )
    return node


def location(root: Location, node: str) -> Location:
    """Where ``node`` exports under ``root`` (a single host: ``root`` itself)."""
    return root if node == SINGLE_NODE else root.child(check_name(node))


def find_nodes(root: Location) -> list[str]:
    """The nodes that have exported under ``root`` (a directory with a
    manifest), sorted."""
    selector = pafs.FileSelector(root.path, allow_not_found=True)
    found = []
    for info in root.fs.get_file_info(selector):
        name = info.base_name
        if info.type != pafs.FileType.Directory or name in RESERVED:
            continue
        if NAME_RE.match(name) and root.child(name).read_text(reader.MANIFEST):
            found.append(name)
    return sorted(found)


def export_node(
    spark: SparkSession,
    store_dir: str | Path,
    root: Location,
    node: str,
    range_bytes: int = scan.RANGE_BYTES,
) -> reader.ExportResult:
    """Bring ``node``'s export under ``root`` up to its log's end; its manifest
    also carries the node's name and its committed consumer offsets."""
    # Offsets before the log: a consumer commits only what the log already
    # held, so no copied offset is past the records this export reaches.
    offsets = [list(row) for row in read_offsets(store_dir)]
    return reader.export_log(
        spark,
        store_dir,
        location(root, node),
        range_bytes,
        extra={"node": node, "offsets": offsets},
    )


@dataclass
class NodeExport:
    """One node's export as a run found it: where, and its manifest."""

    node: str
    where: Location
    manifest: dict

    @property
    def rows(self) -> int:
        return sum(int(c.get("rows", 0)) for c in self.manifest.get("chunks", []))

    @property
    def skipped(self) -> tuple[int, int]:
        """Damaged or quarantined stretches stepped over: (count, bytes)."""
        chunks = self.manifest.get("chunks", [])
        lost = self.manifest.get("lost", [])  # ranges the node's store lost
        return (
            sum(int(c.get("skipped", 0)) for c in chunks) + len(lost),
            sum(int(c.get("skipped_bytes", 0)) for c in chunks)
            + sum(int(n) for _o, n in lost),
        )

    def describe(self) -> dict:
        at = self.manifest.get("exported_at")
        return {
            "log_end": int(self.manifest.get("log_end", 0)),
            "records": self.rows,
            "exported_at": _iso(at) if at else None,
        }


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="seconds")


def check_export(
    root: Location, node: str, *, needed_ms: int, max_age_ms: int
) -> NodeExport:
    """Return ``node``'s export if a run may read it; raise ``ReportInputError``
    saying why not: no manifest, a manifest exported more than ``max_age_ms``
    before ``needed_ms`` (the end of what the run covers), or chunks that are
    missing or do not hold the rows the manifest says."""
    where = location(root, node)
    try:
        text = where.read_text(reader.MANIFEST)
        manifest = json.loads(text) if text is not None else None
    except (OSError, ValueError, StorageError) as exc:
        raise ReportInputError(
            f"the export manifest of node {node} at {where.uri} cannot be read: {exc}"
        ) from exc
    if manifest is None:
        raise ReportInputError(
            f"node {node} has no export at {where.uri}: its host exports there "
            f"(task reports.export on the worker with BROKER_NODE={node}), and "
            "none has yet"
        )
    exported_at = int(manifest.get("exported_at") or 0)
    if exported_at + max_age_ms < needed_ms:
        when = _iso(exported_at) if exported_at else "never (an older manifest)"
        raise ReportInputError(
            f"the export of node {node} is stale: last brought up to date "
            f"{when}, more than REPORTS_EXPORT_MAX_AGE ({max_age_ms // 1000:,} s) "
            f"before the end of the run's window ({_iso(needed_ms)}); is the "
            f"reports.export task running on {node}'s worker?"
        )
    if not reader.chunks_intact(where, manifest):
        raise ReportInputError(
            f"the export of node {node} at {where.uri} is incomplete: a chunk "
            "its manifest lists is missing or does not hold the rows it says; "
            f"{node}'s next export rebuilds it"
        )
    return NodeExport(node, where, manifest)


def read_nodes(spark: SparkSession, exports: Iterable[NodeExport]) -> DataFrame:
    """Return the records of every export (``RECORD_SCHEMA``), each tagged
    with its node: the chunks its checked manifest lists, nothing newer."""
    frames = [
        reader.read_export(spark, e.where, e.node, manifest=e.manifest) for e in exports
    ]
    if not frames:
        return spark.createDataFrame([], RECORD_SCHEMA)
    out = frames[0]
    for frame in frames[1:]:
        out = out.unionByName(frame)
    return out


def offsets_rows(exports: Iterable[NodeExport]) -> list[tuple[str, str, str, int, int]]:
    """(node, group, topic, queue, committed) of every export's offsets copy."""
    return [
        (e.node, str(g), str(t), int(q), int(c))
        for e in exports
        for g, t, q, c in e.manifest.get("offsets", [])
    ]
