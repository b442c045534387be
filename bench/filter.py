"""SQL92 filter benchmark: selector evaluations/s and filtered search throughput.

Usage: python bench/filter.py [--messages 1000000] [--seconds 2] [--store DIR]
       [--skip-search] [--json out.json]

Part 1 evaluates compiled selectors over string properties (the broker's case).
Part 2 builds a store with one topic of ``--messages`` messages in a temporary
directory (or reuses ``--store``), then times newest-first searches over the
whole topic with SQL92 and tag filters, and SQL92 pulls. Prints a table and
the JSON result; figures depend on the machine and its load.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from broker_core import Broker, Message  # noqa: E402
from broker_core.filter import compile  # noqa: E402
from broker_core.search import MessageQuery, search_messages  # noqa: E402

TARGET = "a > 5 AND b IN ('x','y') AND c IS NOT NULL"
EXPRESSIONS = [
    TARGET,
    "a BETWEEN 10 AND 20 OR TAGS = 'TagA'",
    "NOT (b = 'z') AND price > 9.5 AND region STARTSWITH 'eu'",
    "missing IS NULL AND a <> 3",
]
PROPERTY_SETS = [
    {"a": "42", "b": "x", "c": "1", "TAGS": "TagA", "price": "10.25", "region": "eu-1"},
    {"a": "3", "b": "y", "c": "1", "TAGS": "TagB", "price": "1.5", "region": "us-2"},
    {"a": "77", "b": "z", "TAGS": "TagC", "price": "99", "region": "eu-3"},
    {"a": "15", "b": "x", "c": "", "KEYS": "k1 k2", "price": "9.5", "region": "apac"},
]
TOPIC = "FilterBench"
QUEUES = 4


def bench_eval(seconds: float) -> list[dict[str, Any]]:
    """Return evaluations/s of each expression, cycling over PROPERTY_SETS."""
    rows = []
    props = PROPERTY_SETS * 256
    for text in EXPRESSIONS:
        sel = compile(text)
        fn = sel.matches
        n = 0
        start, cpu = time.perf_counter(), time.process_time()
        deadline = start + seconds
        while time.perf_counter() < deadline:
            for p in props:
                fn(p)
            n += len(props)
        elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
        rows.append(
            {
                "expression": text,
                "evaluations": n,
                "per_s": n / elapsed,
                "per_cpu_s": n / cpu,
            }
        )
    return rows


def build_store(path: Path, messages: int) -> float:
    """Fill ``path`` with ``messages`` messages on TOPIC; return seconds taken."""
    start = time.perf_counter()
    with Broker.open(path) as broker:
        broker.create_topic(TOPIC, read_queue_nums=QUEUES, write_queue_nums=QUEUES)
        batch: list[Message] = []
        for i in range(messages):
            props = {"a": str(i % 100), "b": "xyz"[i % 3], "n": str(i)}
            if i % 10:
                props["c"] = "1"
            batch.append(
                Message(
                    TOPIC,
                    b"payload-%d" % i,
                    tags=f"Tag{i % 50}",
                    keys=f"k{i}",
                    properties=props,
                )
            )
            if len(batch) == 1000:
                broker.send_batch(batch)
                batch.clear()
        if batch:
            broker.send_batch(batch)
    return time.perf_counter() - start


def time_search(broker: Broker, query: MessageQuery, limit: int) -> dict[str, Any]:
    start, cpu = time.perf_counter(), time.process_time()
    page = search_messages(broker, query, limit=limit, scan_budget=10**9)
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    return {
        "query": query.sql or query.tag or "(none)",
        "scanned": page.scanned,
        "matched": len(page.messages),
        "seconds": elapsed,
        "per_s": page.scanned / elapsed,
        "per_cpu_s": page.scanned / cpu,
    }


def bench_search(path: Path, total: int) -> list[dict[str, Any]]:
    rows = []
    with Broker.open(path) as broker:
        # Warm the mappings and page cache so every row reads warm data.
        warm = time_search(broker, MessageQuery(topic=TOPIC, sql="n = '-1'"), total)
        warm["query"] = "(warm-up, cold mappings) " + warm["query"]
        rows.append(warm)
        for query, limit in [
            (MessageQuery(topic=TOPIC, sql=TARGET + " AND a > 97"), total),
            (MessageQuery(topic=TOPIC, sql=TARGET.replace("a > 5", "a > 97")), total),
            (MessageQuery(topic=TOPIC, sql="n = '-1'"), total),
            (
                MessageQuery(topic=TOPIC, sql="queueOffset < 100 AND TAGS = 'Tag7'"),
                total,
            ),
            (MessageQuery(topic=TOPIC, tag="Tag7 || Tag8"), total),
        ]:
            rows.append(time_search(broker, query, limit))
        # SQL92 pulls through the facade, queue 0 from the start.
        start, cpu = time.perf_counter(), time.process_time()
        offset, pulled, matched = 0, 0, 0
        end = broker.store.max_offset(TOPIC, 0)
        while offset < end:
            res = broker.pull("g", TOPIC, 0, offset, 32, "a > 90 AND b = 'x'", "SQL92")
            pulled += res.next_offset - offset
            matched += len(res.messages)
            offset = res.next_offset
        elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
        rows.append(
            {
                "query": "pull SQL92 a > 90 AND b = 'x' (queue 0)",
                "scanned": pulled,
                "matched": matched,
                "seconds": elapsed,
                "per_s": pulled / elapsed,
                "per_cpu_s": pulled / cpu,
            }
        )
    return rows


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--store", type=Path, help="reuse (or create) this store")
    ap.add_argument("--skip-search", action="store_true")
    ap.add_argument("--json", type=Path, help="also write the JSON result here")
    args = ap.parse_args(argv)

    result: dict[str, Any] = {
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count()},
        "eval": bench_eval(args.seconds),
    }
    print(f"{'expression':58} {'evals/s':>11} {'per CPU s':>11}")
    for row in result["eval"]:
        print(
            f"{row['expression'][:58]:58} {row['per_s']:11,.0f} "
            f"{row['per_cpu_s']:11,.0f}"
        )

    if not args.skip_search:
        tmp = None
        path = args.store
        if path is None:
            tmp = Path(tempfile.mkdtemp(prefix="filter-bench-"))
            path = tmp / "store"
        try:
            built = None
            if not (path / "commitlog").exists():
                built = build_store(path, args.messages)
                print(f"\nbuilt {args.messages:,} messages in {built:.1f} s")
            result["store"] = {"messages": args.messages, "build_seconds": built}
            result["search"] = bench_search(path, args.messages)
        finally:
            if tmp is not None:
                shutil.rmtree(tmp, ignore_errors=True)
        print(
            f"\n{'search':56} {'scanned':>9} {'matched':>8} {'s':>6} "
            f"{'msgs/s':>9} {'per CPU s':>9}"
        )
        for row in result["search"]:
            print(
                f"{row['query'][:56]:56} {row['scanned']:9,} {row['matched']:8,} "
                f"{row['seconds']:6.2f} {row['per_s']:9,.0f} {row['per_cpu_s']:9,.0f}"
            )
    text = json.dumps(result, indent=2)
    print("\n" + text)
    if args.json:
        args.json.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
