"""Spark reports benchmark: the four reports over a store of N messages, beside
the same aggregation done by a plain Python scan of the log (one process, and
one process per core with multiprocessing), all in the same run.

Usage: python bench/reports.py [--messages 10000000] [--store DIR] [--rebuild]
                               [--processes N] [--master local[*]] [--json out]
                               [--catch-up 1000000]

The store (``--store``, default ``var/bench/reports-store``) is built once and
reused while it holds the same ``--messages``: N messages with 100-byte bodies
on 8 topics (tags ``tag0-4``, keys ``k0-999``), plus 5,000 transactions
(3/5 committed, 1/5 rolled back, 1/5 left pending), 3,000 delayed messages
(level 1 and 50 ms timers, delivered) and two consumer groups half-way through.

Timed, in one process:

* Spark start-up (``get_session``), shown apart;
* cold run: decode the whole log into the Parquet export (one task per 32 MiB
  range), then each report (``runner.run_report``: compute + write results);
* warm run: each report again over the export, which is already current (what
  a scheduled run costs when the Celery export task keeps up with the log);
* Python scan of the export, one process per core: read the same Parquet
  export the warm run reads and aggregate the same four reports in dicts (the
  same work as the warm run);
* Python scan of the log, one process, then one process per core: decode every
  record (``scan.iter_range``, the same decoder) and aggregate (the same work
  as the cold run);
* export catch-up: ``--catch-up`` new messages appended (1,000,000 by default;
  the store keeps them), then the export brought up to date, as the Celery
  task ``reports.export`` does between runs.

Every summary is cross-checked between Spark and the Python scans. Ratios:
cold Spark (start-up, decode, reports) over the log scan; warm reports (start-up
apart) over the export scan.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shutil
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from broker_core import Broker, Message  # noqa: E402
from console.reports.jobs import scan  # noqa: E402

TOPICS = 8
BODY = b"x" * 100
TRANSACTIONS = 5_000
DELAYS = 3_000
HOUR = 3_600_000
SYSTEM = scan._SYSTEM_PREFIXES


# --- the store ---------------------------------------------------------------


def build_store(path: Path, messages: int) -> dict[str, Any]:
    """Build the benchmark store (or reuse it); return what it holds."""
    marker = path / "bench.json"
    if marker.exists():
        info = json.loads(marker.read_text())
        if info.get("messages") == messages:
            info["reused"] = True
            return info
    shutil.rmtree(path, ignore_errors=True)
    started = time.monotonic()
    from broker_core.schedule import DelayService
    from broker_core.transaction import TransactionService

    with Broker.open(str(path), flush="async") as broker:
        batch = 1000
        for i in range(0, messages, batch):
            broker.send_batch(
                [
                    Message(
                        f"T{j % TOPICS}", BODY, tags=f"tag{j % 5}", keys=f"k{j % 1000}"
                    )
                    for j in range(i, min(i + batch, messages))
                ]
            )
        with TransactionService(broker) as tx:
            for i in range(TRANSACTIONS):
                half = tx.send_half("PID_bench", Message("T0", BODY, tags="tx"))
                if i % 5 < 3:
                    tx.end_transaction(half.transaction_id, "PID_bench", "COMMIT")
                elif i % 5 == 3:
                    tx.end_transaction(half.transaction_id, "PID_bench", "ROLLBACK")
        delays = DelayService(broker)
        for i in range(DELAYS):
            props = {"DELAY": "1"} if i % 3 == 0 else {"TIMER_DELAY_MS": "50"}
            broker.send(Message("T1", BODY, properties=props))
        time.sleep(1.2)
        delays.deliver_due(budget_s=2.0)
        delays.close()
        for q in range(4):
            for group in ("g1", "g2"):
                end = broker.store.max_offset("T2", q)
                broker.commit_offset(group, "T2", q, end // 2)
    info = {
        "messages": messages,
        "build_s": round(time.monotonic() - started, 1),
        "log_bytes": scan.commit_position(path),
        "reused": False,
    }
    marker.write_text(json.dumps(info))
    return info


# --- the plain Python scan ---------------------------------------------------


def _bucket(size: int) -> int:
    for i, upper in enumerate((64, 256, 1024, 4096, 65536)):
        if size <= upper:
            return i
    return 5


class Agg:
    """The four reports' aggregates over the records of some ranges."""

    def __init__(self, committed: set[tuple[str, int, int]]) -> None:
        self.committed = committed
        self.hourly: dict[tuple[str, int], list[int]] = {}
        self.tags: Counter = Counter()
        self.keys: Counter = Counter()
        self.sizes: Counter = Counter()
        self.halves: dict[int, tuple[str, str, int]] = {}
        self.ops: list[tuple[int, int, str, str | None, str | None, int]] = []
        self.commits: dict[int, int] = {}
        self.parked: dict[str, tuple[str, int]] = {}
        self.delivered: dict[str, int] = {}
        self.recalled: set[str] = set()
        self.ends: dict[tuple[str, int], int] = {}
        self.first_unconsumed: dict[tuple[str, int, int], int] = {}

    def add_range(self, rng: tuple[str, int, int, int]) -> Agg:
        """Aggregate the records decoded from a log range."""
        return self.add_records(scan.iter_range(rng))

    def add_parquet(self, path: str) -> Agg:
        """Aggregate the records of one Parquet file of the export."""
        import pyarrow.parquet as pq

        names = list(scan.COLUMNS)
        for batch in pq.ParquetFile(path).iter_batches(65536, columns=names):
            cols = [batch.column(i).to_pylist() for i in range(len(names))]
            self.add_records(zip(*cols, strict=True))
        return self

    def add_records(self, records) -> Agg:
        hourly, tags, keys, sizes = self.hourly, self.tags, self.keys, self.sizes
        ends, committed = self.ends, self.committed
        for (
            topic,
            qid,
            qoff,
            phys,
            sysflag,
            _born,
            stored,
            body,
            prepared,
            tag,
            key,
            props,
        ) in records:
            tx_value = sysflag & 0xC
            if tx_value in (0, 8):
                q = (topic, qid)
                if qoff >= ends.get(q, -1):
                    ends[q] = qoff
                if (topic, qid, qoff) in committed:
                    self.first_unconsumed[(topic, qid, qoff)] = stored
            if topic.startswith(SYSTEM):
                self._system(topic, qoff, phys, stored, tag, props)
                continue
            hk = (topic, stored // HOUR)
            h = hourly.get(hk)
            if h is None:
                hourly[hk] = [1, body, body, body]
            else:
                h[0] += 1
                h[1] += body
                if body < h[2]:
                    h[2] = body
                if body > h[3]:
                    h[3] = body
            if tag is not None:
                tags[(topic, tag)] += 1
            if key is not None:
                for k in set(key.split(" ")):  # a repeated key counts once
                    if k:
                        keys[(topic, k)] += 1
            sizes[(topic, _bucket(body))] += 1
            if tx_value == 8 and prepared > 0:
                self.commits.setdefault(prepared, stored)
            if props:
                src = dict(props).get("DELAY_SRC")
                if src is not None and src not in self.delivered:
                    self.delivered[src] = stored
        return self

    def _system(self, topic, qoff, phys, stored, tag, props) -> None:
        p = dict(props)
        if topic == "RMQ_SYS_TRANS_HALF_TOPIC" and p.get("TRAN_MSG") == "true":
            self.halves[phys] = (p.get("PGROUP", ""), p.get("REAL_TOPIC", ""), stored)
        elif topic == "RMQ_SYS_TRANS_OP_HALF_TOPIC" and "TRANS_OFFSET" in p:
            self.ops.append(
                (
                    int(p["TRANS_OFFSET"]),
                    phys,
                    tag,
                    p.get("TRAN_OUTCOME"),
                    p.get("TRAN_SOURCE"),
                    stored,
                )
            )
        elif topic == "SCHEDULE_TOPIC_XXXX" and "DELAY" in p:
            level = int(p["DELAY"])
            self.parked[f"L{level}:{qoff}"] = ("level", stored, level)
        elif topic == "rmq_sys_wheel_timer":
            if "TIMER_DEL_UNIQKEY" in p:
                self.recalled.add(p.get("DELAY_SRC", ""))
            elif "TIMER_OUT_MS" in p:
                self.parked[f"T:{qoff}"] = ("timer", int(p["TIMER_OUT_MS"]), 0)

    def merge(self, other: Agg) -> Agg:
        for k, v in other.hourly.items():
            h = self.hourly.get(k)
            if h is None:
                self.hourly[k] = v
            else:
                h[0] += v[0]
                h[1] += v[1]
                h[2] = min(h[2], v[2])
                h[3] = max(h[3], v[3])
        self.tags.update(other.tags)
        self.keys.update(other.keys)
        self.sizes.update(other.sizes)
        self.halves.update(other.halves)
        self.ops.extend(other.ops)
        for k, v in other.commits.items():
            self.commits[k] = min(v, self.commits.get(k, v))
        self.parked.update(other.parked)
        for k, v in other.delivered.items():
            self.delivered[k] = min(v, self.delivered.get(k, v))
        self.recalled |= other.recalled
        for k, v in other.ends.items():
            self.ends[k] = max(v, self.ends.get(k, -1))
        self.first_unconsumed.update(other.first_unconsumed)
        return self

    def finish(self, levels_ms: list[int], offsets: list, now_ms: int) -> dict:
        """Return the summaries the Spark reports print (for cross-checking)."""
        traffic = {
            "messages": sum(h[0] for h in self.hourly.values()),
            "bytes": sum(h[1] for h in self.hourly.values()),
            "topics": len({t for t, _ in self.hourly}),
            "top_tags": len(_top(self.tags)),
            "top_keys": len(_top(self.keys)),
        }
        last: dict[int, tuple] = {}
        outcome_ts: dict[int, int] = {}
        for half, op_off, kind, outcome, source, ts in self.ops:
            if kind in ("d", "x", "r") and op_off > last.get(half, (-1,))[0]:
                last[half] = (op_off, kind, outcome, source)
            if kind == "d":
                outcome_ts[half] = min(ts, outcome_ts.get(half, ts))
        states: Counter = Counter()
        outcome_ms = []
        for half, (_g, _t, ts) in self.halves.items():
            lk = last.get(half)
            if lk and lk[1] == "d":
                states["COMMITTED" if lk[2] == "COMMIT" else "ROLLED_BACK"] += 1
                outcome_ms.append(outcome_ts[half] - ts)
            elif lk and lk[1] == "x":
                states["DISCARDED"] += 1
            elif not lk and half in self.commits:
                states["COMMITTED"] += 1
                outcome_ms.append(self.commits[half] - ts)
            else:
                states["PENDING"] += 1
        lags = []
        for src, (kind, t, level) in self.parked.items():
            due = t + levels_ms[level - 1] if kind == "level" else t
            if src in self.delivered:
                lags.append(self.delivered[src] - due)
        lag_total = 0
        for _group, topic, qid, off in offsets:
            end = self.ends.get((topic, qid), -1) + 1
            lag_total += max(0, end - off)
        return {
            "topic_traffic": traffic,
            "transaction_outcomes": {
                "halves": len(self.halves),
                "states": dict(states),
                "outcome_ms_p99": _pct(outcome_ms, 0.99),
            },
            "delay_punctuality": {
                "scheduled": len(self.parked),
                "delivered": len(lags),
                "recalled": len(self.recalled & set(self.parked)),
                "lag_ms_p99": _pct(lags, 0.99),
            },
            "consumer_lag": {"lag": lag_total},
        }


def _top(counter: Counter, n: int = 10) -> list:
    by_topic: dict[str, list] = defaultdict(list)
    for (topic, value), count in counter.items():
        by_topic[topic].append((-count, value))
    return [v for vals in by_topic.values() for v in sorted(vals)[:n]]


def _pct(values: list[int], q: float) -> int | None:
    if not values:
        return None
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


_COMMITTED: set = set()


def _init(committed: set) -> None:
    global _COMMITTED
    _COMMITTED = committed


def _scan_one(item: tuple | str) -> Agg:
    if isinstance(item, str):
        return Agg(_COMMITTED).add_parquet(item)
    return Agg(_COMMITTED).add_range(item)


def python_scan(items, offsets, levels_ms, now_ms, processes: int) -> dict:
    """Aggregate the four reports in plain Python over ``items``: log ranges
    (decoding the log) or the export's Parquet files (reading what Spark
    reads), in one process or ``processes``."""
    committed = {(t, q, o) for _g, t, q, o in offsets}
    items = [i if isinstance(i, str) else tuple(i) for i in items]
    started = time.monotonic()
    if processes <= 1:
        _init(committed)
        agg = Agg(committed)
        for item in items:
            agg.merge(_scan_one(item))
    else:
        ctx = multiprocessing.get_context("fork")
        with ctx.Pool(processes, initializer=_init, initargs=(committed,)) as pool:
            agg = Agg(committed)
            for part in pool.imap_unordered(_scan_one, items):
                agg.merge(part)
    summary = agg.finish(levels_ms, offsets, now_ms)
    return {"seconds": time.monotonic() - started, "summary": summary}


# --- Spark -------------------------------------------------------------------


def spark_runs(store: Path, work: Path, master: str, range_bytes: int) -> dict:
    from console.reports.jobs import reader, runner
    from console.reports.jobs.session import get_session

    out: dict[str, Any] = {}
    t = time.monotonic()
    spark = get_session(master)
    out["startup_s"] = time.monotonic() - t
    export = work / "export"
    shutil.rmtree(export, ignore_errors=True)
    params = runner.default_params(store)
    for phase in ("cold", "warm"):
        t = time.monotonic()
        result = reader.export_log(spark, store, export, range_bytes)
        records = reader.read_export(spark, export)
        timings = {"export_s": time.monotonic() - t, "export_rows": result.rows}
        summaries = {}
        for name in runner.REPORTS:
            t = time.monotonic()
            output = runner.run_report(spark, name, records, params, work / name)
            timings[name] = time.monotonic() - t
            summaries[name] = output.summary
        timings["total_s"] = timings["export_s"] + sum(
            timings[n] for n in runner.REPORTS
        )
        out[phase] = timings
        out["summaries"] = summaries
    spark.stop()
    return out


def catch_up(
    store: Path, work: Path, master: str, range_bytes: int, count: int
) -> dict:
    """Append ``count`` messages to the store, then bring the export the
    runs above left current up to date (``reader.export_log``: only the new
    log is decoded), as the Celery task ``reports.export`` does: how long the
    warm path takes to catch up after that much new traffic."""
    from console.reports.jobs import reader
    from console.reports.jobs.session import get_session

    t = time.monotonic()
    with Broker.open(str(store), flush="async") as broker:
        for i in range(0, count, 1000):
            broker.send_batch(
                [
                    Message(f"T{j % TOPICS}", BODY, tags=f"tag{j % 5}", keys=f"k{j}")
                    for j in range(i, min(i + 1000, count))
                ]
            )
    appended_s = time.monotonic() - t
    marker = store / "bench.json"
    info = json.loads(marker.read_text())
    info["appended"] = int(info.get("appended", 0)) + count
    marker.write_text(json.dumps(info))
    spark = get_session(master)
    try:
        t = time.monotonic()
        result = reader.export_log(spark, store, work / "export", range_bytes)
        seconds = time.monotonic() - t
    finally:
        spark.stop()
    return {
        "messages": count,
        "append_s": appended_s,
        "export_s": seconds,
        "export_rows": result.rows,
        "rebuilt": result.rebuilt,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--messages", type=int, default=10_000_000)
    ap.add_argument("--store", default="var/bench/reports-store")
    ap.add_argument("--rebuild", action="store_true")
    ap.add_argument("--processes", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--master", default="local[*]")
    ap.add_argument("--range-mb", type=int, default=scan.RANGE_BYTES >> 20)
    ap.add_argument("--json", help="also write the result here")
    ap.add_argument(
        "--catch-up",
        type=int,
        default=1_000_000,
        help="then append this many messages and time the export's catch-up "
        "(0: skip; the store keeps them, bench.json counts them)",
    )
    args = ap.parse_args()

    store = Path(args.store).resolve()
    if args.rebuild:
        shutil.rmtree(store, ignore_errors=True)
    print(f"store {store}: building or reusing {args.messages:,} messages ...")
    info = build_store(store, args.messages)
    print(f"  {info}")
    from broker_core.config import DEFAULT_DELAY_LEVELS, parse_delay_levels
    from console.reports.jobs.consumer_lag import read_offsets

    levels = parse_delay_levels(DEFAULT_DELAY_LEVELS)
    offsets = read_offsets(store)
    now_ms = int(time.time() * 1000)
    range_bytes = args.range_mb << 20
    ranges = scan.split_ranges(store, range_bytes)
    work = Path(tempfile.mkdtemp(prefix="bench-reports-"))
    try:
        print(f"Spark ({args.master}), {len(ranges)} ranges ...")
        spark = spark_runs(store, work, args.master, range_bytes)
        files = sorted(str(f) for f in (work / "export").rglob("part-*.parquet"))
        print(f"Python scan of the export ({len(files)} files), "
              f"{args.processes} processes ...")  # fmt: skip
        export_multi = python_scan(files, offsets, levels, now_ms, args.processes)
        print("Python scan of the log, 1 process ...")
        single = python_scan(ranges, offsets, levels, now_ms, 1)
        print(f"Python scan of the log, {args.processes} processes ...")
        multi = python_scan(ranges, offsets, levels, now_ms, args.processes)
        caught = None
        if args.catch_up:
            print(f"append {args.catch_up:,} messages, export catch-up ...")
            caught = catch_up(store, work, args.master, range_bytes, args.catch_up)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    checks = _cross_check(spark["summaries"], multi["summary"])
    assert single["summary"] == multi["summary"], "python scans disagree"
    assert export_multi["summary"] == multi["summary"], "export and log disagree"
    cold_total = spark["startup_s"] + spark["cold"]["total_s"]
    warm_total = spark["startup_s"] + spark["warm"]["total_s"]
    warm_reports = spark["warm"]["total_s"] - spark["warm"]["export_s"]
    result = {
        "messages": args.messages,
        "store": info,
        "cpus": os.cpu_count(),
        "load_avg": os.getloadavg(),
        "spark": {k: v for k, v in spark.items() if k != "summaries"},
        "python_single_s": single["seconds"],
        "python_multi_s": multi["seconds"],
        "python_export_multi_s": export_multi["seconds"],
        "processes": args.processes,
        "spark_cold_total_s": cold_total,
        "spark_warm_total_s": warm_total,
        "spark_warm_reports_s": warm_reports,
        # Same work: decoding the whole log and aggregating (start-up included).
        "cold_vs_log_scan": cold_total / multi["seconds"],
        # Same work: reading the current export and aggregating, warm session
        # (start-up apart), with and without the export's up-to-date check.
        "warm_vs_export_scan": warm_reports / export_multi["seconds"],
        "warm_with_check_vs_export_scan": spark["warm"]["total_s"]
        / export_multi["seconds"],
        "cross_check": checks,
        "summaries": spark["summaries"],
        "catch_up": caught,
    }
    _print_table(result)
    print(json.dumps(result, indent=1, default=str))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1, default=str))


def _cross_check(spark: dict, py: dict) -> dict:
    """Return {check: ok} comparing Spark's summaries with the Python scan's."""
    tt, tx, dp = (
        spark["topic_traffic"],
        spark["transaction_outcomes"],
        spark["delay_punctuality"],
    )
    states = {k: v for k, v in tx["states"].items() if v}
    return {
        "traffic messages": tt["messages"] == py["topic_traffic"]["messages"],
        "traffic bytes": tt["bytes"] == py["topic_traffic"]["bytes"],
        "transaction states": states == py["transaction_outcomes"]["states"],
        "delays scheduled/delivered/recalled": (
            dp["scheduled"],
            dp["delivered"],
            dp["recalled"],
        )
        == tuple(
            py["delay_punctuality"][k] for k in ("scheduled", "delivered", "recalled")
        ),
        "consumer lag": spark["consumer_lag"]["lag"] == py["consumer_lag"]["lag"],
    }


def _print_table(r: dict) -> None:
    s = r["spark"]
    cold, warm = s["cold"], s["warm"]
    rows = [("Spark start-up", s["startup_s"], s["startup_s"])]
    rows.append(("decode log -> Parquet export", cold["export_s"], warm["export_s"]))
    for name in (
        "transaction_outcomes",
        "delay_punctuality",
        "topic_traffic",
        "consumer_lag",
    ):
        rows.append((f"report {name}", cold[name], warm[name]))
    rows.append(
        (
            "Spark total, start-up included",
            r["spark_cold_total_s"],
            r["spark_warm_total_s"],
        )
    )
    gib = r["store"]["log_bytes"] / 2**30
    print()
    print(f"{r['messages']:,} messages, {gib:.2f} GiB of log")
    print(f"{'step':<34} {'cold (s)':>10} {'warm (s)':>10}")
    for name, c, w in rows:
        print(f"{name:<34} {c:>10.1f} {w:>10.1f}")
    n = r["processes"]
    print(f"{'Python scan of the log, 1 process':<40} {r['python_single_s']:>10.1f}")
    print(
        f"{f'Python scan of the log, {n} processes':<40} {r['python_multi_s']:>10.1f}"
    )
    print(
        f"{f'Python scan of the export, {n} processes':<40} "
        f"{r['python_export_multi_s']:>10.1f}"
    )
    print(
        f"cold (start-up, decode, reports) / log scan: {r['cold_vs_log_scan']:.2f}x; "
        f"warm reports / export scan: {r['warm_vs_export_scan']:.2f}x "
        f"({r['warm_with_check_vs_export_scan']:.2f}x with the export check)"
    )
    print(f"cross-check with the Python scan: {r['cross_check']}")
    c = r.get("catch_up")
    if c:
        print(
            f"export catch-up after {c['messages']:,} new messages: "
            f"{c['export_s']:.1f} s ({c['export_rows']:,} rows; appending them "
            f"took {c['append_s']:.1f} s{'; export rebuilt' if c['rebuilt'] else ''})"
        )
    print()


if __name__ == "__main__":
    main()
