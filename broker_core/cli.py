"""The command line: ``inspect`` a store without opening it for writing, ``bench``."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from broker_core.checkpoint import abort_exists, read_checkpoint
from broker_core.consumequeue import ConsumeQueueTable
from broker_core.metadata import TopicTable
from broker_core.record import RecordCheck, check_record
from broker_core.segment_queue import SegmentQueue


def inspect_store(root: Path, segment_size: int | None = None) -> dict[str, Any]:
    """Return segments, topics, queue depths and a full CRC check of the log.

    Reads the files only: no lock is taken and nothing is repaired.
    """
    log_dir = root / "commitlog"
    names = sorted(p.name for p in log_dir.iterdir()) if log_dir.is_dir() else []
    if segment_size is None:
        segment_size = (log_dir / names[0]).stat().st_size if names else 1 << 30
    segs = SegmentQueue(log_dir, segment_size)
    segments = []
    records = bad = 0
    first_bad: int | None = None
    try:
        for base in segs.list_bases():
            seg = segs.segment(base)
            assert seg is not None
            pos = n = 0
            status = "end"
            while pos < seg.size:
                chk = check_record(seg.view, pos, seg.size, True, True)
                if chk.status is RecordCheck.OK:
                    n += 1
                    pos += chk.size
                    continue
                if chk.status is RecordCheck.BLANK:
                    status = "blank"
                elif chk.status is RecordCheck.CORRUPT:
                    status = "corrupt"
                    bad += 1
                    if first_bad is None:
                        first_bad = base + pos
                break
            records += n
            segments.append(
                {"base": base, "records": n, "used": pos, "ends_with": status}
            )
    finally:
        segs.close()
    topics = TopicTable(root / "config" / "topics.json").topics
    cqs = ConsumeQueueTable(root, 300_000)
    depths: dict[str, dict[int, int]] = {}
    try:
        for topic, qid in cqs.on_disk():
            bases = cqs.get(topic, qid).segments.list_bases()
            size = (
                (root / "consumequeue" / topic / str(qid) / f"{bases[-1]:020d}")
                .stat()
                .st_size
                if bases
                else 20
            )
            cqs.units_per_file = max(1, size // 20)
            cqs.queues.pop((topic, qid), None)
            depths.setdefault(topic, {})[qid] = cqs.get(topic, qid).max_offset()
    finally:
        cqs.close()
    cp = read_checkpoint(root / "checkpoint")
    return {
        "store_dir": str(root),
        "clean_shutdown": not abort_exists(root),
        "segment_size": segment_size,
        "segments": segments,
        "records": records,
        "crc_ok": bad == 0,
        "first_bad_offset": first_bad,
        "checkpoint": {
            "flushed": cp.flushed_offset,
            "logics": cp.logics_offset,
            "index": cp.index_offset,
        },
        "topics": {
            name: {
                "read_queue_nums": c.read_queue_nums,
                "write_queue_nums": c.write_queue_nums,
                "perm": c.perm,
                "message_type": c.message_type,
                "depths": [depths.get(name, {}).get(q, 0) for q in range(c.queue_nums)],
            }
            for name, c in sorted(topics.items())
        },
    }


def _print_inspect(info: dict[str, Any]) -> None:
    print(f"store {info['store_dir']}  clean shutdown: {info['clean_shutdown']}")
    print(f"segments ({info['segment_size']} bytes each):")
    for s in info["segments"]:
        print(
            f"  {s['base']:020d}  records {s['records']:>9}  "
            f"used {s['used']:>12}  {s['ends_with']}"
        )
    print(
        f"records: {info['records']}  CRC: "
        + ("OK" if info["crc_ok"] else f"DAMAGED at {info['first_bad_offset']}")
    )
    print("topics:")
    for name, t in info["topics"].items():
        print(
            f"  {name:<40} queues {t['read_queue_nums']}/{t['write_queue_nums']}  "
            f"depths {t['depths']}"
        )


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m broker_core")
    sub = ap.add_subparsers(dest="cmd", required=True)
    ins = sub.add_parser(
        "inspect", help="segments, topics, queue depths, full CRC check"
    )
    ins.add_argument("store_dir")
    ins.add_argument("--json", action="store_true")
    sub.add_parser(
        "bench",
        help="throughput benchmark beside Redis Streams and SQLite",
        add_help=False,
    )
    from broker_core.endpoint.cli import add_arguments as _serve_args

    _serve_args(sub.add_parser("serve", help="run the RocketMQ 5 gRPC endpoint"))
    args, rest = ap.parse_known_args(argv)
    if args.cmd == "serve":
        from broker_core.endpoint.cli import run as serve_run

        return serve_run(args)
    if args.cmd == "bench":
        from broker_core.benchmark import main as bench_main

        return bench_main(rest)
    info = inspect_store(Path(args.store_dir))
    if args.json:
        print(json.dumps(info, indent=2))
    else:
        _print_inspect(info)
    return 0 if info["crc_ok"] else 1
