"""The command line: ``inspect`` a store without opening it for writing, ``bench``."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

from broker_core.checkpoint import abort_exists, read_checkpoint
from broker_core.commitlog import CommitLog, Damage
from broker_core.consumequeue import ConsumeQueueTable
from broker_core.metadata import TopicTable
from broker_core.quarantine import Quarantine
from broker_core.shared import read_commit_pos


def inspect_store(root: Path, segment_size: int | None = None) -> dict[str, Any]:
    """Return segments, topics, queue depths and a full CRC check of the log.

    Reads the files only: no lock is taken and nothing is repaired.
    """
    log_dir = root / "commitlog"
    names = sorted(p.name for p in log_dir.iterdir()) if log_dir.is_dir() else []
    if segment_size is None:
        segment_size = (log_dir / names[0]).stat().st_size if names else 1 << 30
    log = CommitLog(root, segment_size, readonly=True)
    per_seg: dict[int, dict[str, Any]] = {
        base: {"base": base, "records": 0, "used": 0, "ends_with": "end"}
        for base in log.segments.list_bases()
    }
    records = 0
    damage: list[Damage] = []
    try:
        cp0 = read_checkpoint(root / "checkpoint")
        committed = max(read_commit_pos(root), cp0.flushed_offset)
        for seg, pos, size in log.scan(
            log.first_offset(), None, True, damage, committed
        ):
            records += 1
            s = per_seg[seg.base]
            s["records"] += 1
            s["used"] = pos + size
        for base, s in per_seg.items():
            nxt = per_seg.get(base + segment_size)
            if nxt is not None and nxt["records"]:
                s["ends_with"] = "blank"
    finally:
        log.close()
    for d in damage:
        per_seg[d.start - d.start % segment_size]["ends_with"] = "corrupt"
    segments = list(per_seg.values())
    quarantined = Quarantine(root).ranges
    bad = len(damage)
    first_bad = damage[0].start if damage else None
    topics = TopicTable(root / "config" / "topics.json").topics
    cqs = ConsumeQueueTable(root, 300_000)
    depths: dict[str, dict[int, int]] = {}
    try:
        for topic, qid in cqs.on_disk():
            bases = cqs.get(topic, qid).segments.list_bases()
            cqs.queues.pop((topic, qid), None)
            size = (
                (root / "consumequeue" / topic / str(qid) / f"{bases[-1]:020d}")
                .stat()
                .st_size
                if bases
                else 20
            )
            cqs.units_per_file = max(1, size // 20)
            cqs.queues.pop((topic, qid), None)
            cq = cqs.get(topic, qid)
            cq.segments.readonly = True  # never extend a short file
            depths.setdefault(topic, {})[qid] = cq.max_offset()
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
        "damaged_ranges": [
            {"start": d.start, "end": d.end, "reason": d.reason} for d in damage
        ],
        "quarantined": [
            {"offset": q.offset, "length": q.length, "reason": q.reason}
            for q in quarantined
        ],
        "clean": bad == 0 and not quarantined,
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
    for q in info["quarantined"]:
        print(
            f"quarantined: log bytes {q['offset']} .. {q['offset'] + q['length']} "
            f"({q['reason']})"
        )
    if not info["clean"]:
        print("NOT CLEAN: run 'python -m broker_core verify STORE' for details")
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
    ver = sub.add_parser(
        "verify",
        help="check every record, queue, index and config file; --repair fixes",
    )
    ver.add_argument("store_dir")
    ver.add_argument(
        "--repair",
        action="store_true",
        help="open the store alone: quarantine damage, rebuild queues and index",
    )
    ver.add_argument("--json", action="store_true")
    sub.add_parser(
        "bench",
        help="throughput benchmark beside Redis Streams and SQLite",
        add_help=False,
    )
    top = sub.add_parser("topic", help="create or change a topic (its message type)")
    top.add_argument("action", choices=["create", "update", "list"])
    top.add_argument("store_dir")
    top.add_argument("name", nargs="?")
    top.add_argument(
        "--type",
        default=None,
        help="NORMAL (default), FIFO, DELAY, TRANSACTION or MIXED",
    )
    top.add_argument("--queues", type=int, default=None)
    grp = sub.add_parser(
        "group", help="a consumer group's settings: FIFO, delivery attempts"
    )
    grp.add_argument("action", choices=["set", "list"])
    grp.add_argument("store_dir")
    grp.add_argument("name", nargs="?")
    grp.add_argument("--fifo", action="store_true")
    grp.add_argument("--max-delivery-attempts", type=int, default=None)
    cred = sub.add_parser(
        "credentials",
        help="make a cluster's secrets, its CA and a certificate per host",
        description=(
            "Write into DIR what is missing of: admin.token, ha.secret, "
            "redis.password, a private CA (ca.pem, ca-key.pem) and "
            "hosts/NAME/cert.pem + key.pem for each --host. Run again to add "
            "hosts; nothing that exists is replaced unless --renew names it."
        ),
    )
    cred.add_argument("dir")
    cred.add_argument(
        "--host",
        action="append",
        default=[],
        metavar="NAME=ADDR[,ADDR...]",
        help="a host and the IP addresses or DNS names its certificate names",
    )
    cred.add_argument("--cluster", default="cluster", help="named in the CA")
    cred.add_argument(
        "--renew", action="append", default=[], metavar="NAME",
        help="issue this host's certificate again",
    )  # fmt: skip
    from broker_core.endpoint.cli import add_arguments as _serve_args

    _serve_args(sub.add_parser("serve", help="run the RocketMQ 5 gRPC endpoint"))
    from broker_core.ha import cli as ha_cli

    ha_cli.add_commands(sub)
    args, rest = ap.parse_known_args(argv)
    if args.cmd in ha_cli.COMMANDS:
        return ha_cli.run(args)
    if args.cmd == "serve":
        from broker_core.endpoint.cli import run as serve_run

        return serve_run(args, argv[argv.index("serve") + 1 :])
    if args.cmd == "bench":
        from broker_core.benchmark import main as bench_main

        return bench_main(rest)
    if args.cmd == "verify":
        return _verify(args)
    if args.cmd == "credentials":
        if rest:
            ap.error(f"credentials: unknown arguments: {' '.join(rest)}")
        return _credentials(args)
    if args.cmd in ("topic", "group"):
        return _admin(args)
    info = inspect_store(Path(args.store_dir))
    if args.json:
        print(json.dumps(info, indent=2))
    else:
        _print_inspect(info)
    return 0 if info["clean"] else 1


def _credentials(args: argparse.Namespace) -> int:
    from broker_core.cluster.credentials import (
        CredentialsError,
        make_credentials,
        parse_host,
    )

    try:
        hosts = dict(parse_host(h) for h in args.host)
        made = make_credentials(
            Path(args.dir), hosts, cluster=args.cluster, renew=tuple(args.renew)
        )
    except (CredentialsError, OSError) as exc:
        print(f"credentials: {exc}", file=sys.stderr)
        return 2
    for rel in made.written:
        print(f"wrote {Path(args.dir) / rel}")
    for rel in made.kept:
        print(f"kept  {Path(args.dir) / rel}")
    for rel in made.tightened:
        print(f"mode  {Path(args.dir) / rel}: was readable by others, now 0600")
    return 0


def _admin(args: argparse.Namespace) -> int:
    """``topic`` and ``group``: change the store's metadata beside running
    processes (they see the change on their next look)."""
    from broker_core import Broker
    from broker_core.errors import BrokerError

    if args.action != "list" and not args.name:
        print(f"{args.cmd} {args.action} needs a name")
        return 2
    try:
        with Broker.open(args.store_dir) as broker:
            if args.cmd == "group":
                if args.action == "set":
                    g = broker.put_group(
                        args.name, args.fifo, args.max_delivery_attempts
                    )
                    print(json.dumps(asdict(g)))
                else:
                    for g in broker.list_groups():
                        print(json.dumps(asdict(g)))
            elif args.action == "list":
                for t in broker.list_topics():
                    print(json.dumps(asdict(t)))
            else:
                opts: dict[str, Any] = {}
                if args.type:
                    opts["message_type"] = args.type.upper()
                if args.action == "create":
                    if args.queues:
                        opts["read_queue_nums"] = args.queues
                    t = broker.create_topic(args.name, **opts)
                else:
                    if args.queues:
                        opts["read_queue_nums"] = opts["write_queue_nums"] = args.queues
                    t = broker.update_topic(args.name, **opts)
                print(json.dumps(asdict(t)))
    except BrokerError as exc:
        print(f"{type(exc).__name__}: {exc}")
        return 2
    return 0


def _verify(args: argparse.Namespace) -> int:
    from broker_core.errors import BrokerError
    from broker_core.verify import print_report, repair_and_verify, verify_store

    root = Path(args.store_dir)
    if not (root / "commitlog").is_dir() and not (root / "config").is_dir():
        print(f"{root} is not a store directory (no commitlog/ or config/)")
        return 2
    if args.repair:
        try:
            # Verified once more by the repair itself: not again here.
            report = repair_and_verify(root)
        except BrokerError as exc:
            print(f"repair failed: {exc}")
            return 2
    else:
        report = verify_store(root)
    if args.json:
        print(json.dumps(report.as_dict(), indent=2))
    else:
        print_report(report)
    return 0 if report.ok else 1
