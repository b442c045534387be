"""Throughput benchmark of the store beside Redis Streams and SQLite (WAL).

``python -m broker_core bench`` (or ``bench/produce.py``) runs, with 1 KiB
bodies: per-message send, batched send, a 4-process aggregate (batched), sync
flush with group commit from 8 concurrent producer threads, and consume (pull
and decode); then the same workloads on Redis Streams (XADD; pipelined for
batches) on a private ``redis-server`` started for the run with AOF
``everysec`` (``always`` for the sync row), never a shared server's settings;
and SQLite in WAL mode. Figures are messages per second; nothing here is a test.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import shutil
import socket
import sqlite3
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

BODY = b"x" * 1024
BATCH = 128
WORKLOADS = [
    "send_single",
    "send_batch",
    "send_4proc",
    "sync_group_commit_8",
    "consume",
]


def _timed(seconds: float, step: Callable[[], int]) -> float:
    """Run ``step`` (returns messages done) until ``seconds`` pass; return msg/s."""
    n = 0
    t0 = time.perf_counter()
    while True:
        n += step()
        dt = time.perf_counter() - t0
        if dt >= seconds:
            return n / dt


# -- this store -----------------------------------------------------------------
def _processes(target: Callable[..., None], args: tuple[Any, ...], n: int = 4) -> float:
    """Run ``n`` spawned producers of ``target(*args, start, out)``; sum their rates.

    Each producer waits on the shared start event so all begin together after
    their imports, then puts its msg/s on the queue.
    """
    ctx = multiprocessing.get_context("spawn")
    start, out = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=target, args=(*args, start, out)) for _ in range(n)]
    for p in procs:
        p.start()
    time.sleep(1.0)
    start.set()
    total = sum(out.get(timeout=120) for _ in procs)
    for p in procs:
        p.join()
    return total


def _ours_proc(store: str, seconds: float, start: Any, out: Any) -> None:
    from broker_core import Broker, Message

    with Broker.open(store, index_in_background=False) as b:
        msgs = [Message("Bench4", BODY) for _ in range(BATCH)]
        start.wait()
        out.put(_timed(seconds, lambda: len(b.send_batch(msgs))))


def bench_ours(seconds: float, workdir: Path) -> dict[str, float]:
    from broker_core import Broker, Message, PullStatus

    res: dict[str, float] = {}
    store = workdir / "ours"
    with Broker.open(store, index_in_background=False) as b:
        m = Message("Bench", BODY)
        res["send_single"] = _timed(seconds, lambda: (b.send(m), 1)[1])
        msgs = [Message("Bench", BODY) for _ in range(BATCH)]
        res["send_batch"] = _timed(seconds, lambda: len(b.send_batch(msgs)))
        # Consume everything just written (pull and decode).
        n = 0
        t0 = time.perf_counter()
        for q in range(4):
            off = 0
            while True:
                r = b.pull("bench", "Bench", q, off, 32)
                if r.status is not PullStatus.FOUND:
                    break
                for msg in r.messages:
                    n += len(msg.body) > 0
                off = r.next_offset
        res["consume"] = n / (time.perf_counter() - t0)
    res["send_4proc"] = _processes(_ours_proc, (str(store), seconds))
    with Broker.open(
        workdir / "ours_sync", flush="sync", index_in_background=False
    ) as b:
        res["sync_group_commit_8"] = _threads(
            8, seconds, lambda: b.send(Message("Sync", BODY))
        )
        res["sync_fsyncs"] = b.store.flusher.fsync_count
    return res


def _threads(n: int, seconds: float, op: Callable[[], object]) -> float:
    counts = [0] * n
    stop = time.perf_counter() + seconds

    def run(i: int) -> None:
        c = 0
        while time.perf_counter() < stop:
            op()
            c += 1
        counts[i] = c

    t0 = time.perf_counter()
    ts = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return sum(counts) / (time.perf_counter() - t0)


# -- Redis Streams ------------------------------------------------------------------
def _redis_proc(url: str, key: str, seconds: float, start: Any, out: Any) -> None:
    import redis

    r = redis.Redis.from_url(url)
    start.wait()

    def step() -> int:
        p = r.pipeline(transaction=False)
        for _ in range(BATCH):
            p.xadd(key, {"b": BODY})
        p.execute()
        return BATCH

    out.put(_timed(seconds, step))


@contextlib.contextmanager
def private_redis(
    fsync: str | None, workdir: Path | None = None, db: str = "/0"
) -> Iterator[str]:
    """A redis-server of this run only, on a free loopback port in a temporary
    directory (under ``workdir`` if given): its settings are ours to choose,
    never a shared server's. AOF with ``fsync`` (``everysec``, ``always``),
    none when ``fsync`` is None. Yields its URL (database path ``db``); stopped
    and deleted afterwards. The benchmarks and the test suite's workers
    (tests/workers.py) start theirs here."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise RuntimeError(
            "redis-server is not installed (apt-get install redis-server)"
        )
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    d = Path(tempfile.mkdtemp(prefix="private-redis-", dir=workdir))
    aof = ["--appendonly", "no"] if fsync is None else [
        "--appendonly", "yes", "--appendfsync", fsync]  # fmt: skip
    proc = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
         *aof, "--protected-mode", "no", "--dir", str(d),
         "--logfile", str(d / "redis.log")],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1) as c:
                    c.sendall(b"PING\r\n")
                    if c.recv(16).startswith(b"+PONG"):
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    f"the private redis-server did not start (log in {d})"
                )
            time.sleep(0.05)
        yield f"redis://127.0.0.1:{port}{db}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
        shutil.rmtree(d, ignore_errors=True)


def bench_redis(seconds: float, url: str | None, workdir: Path) -> dict[str, Any]:
    """Redis Streams: on a private redis-server (AOF everysec, and ``always`` for
    the sync row) unless ``url`` names a server to measure as it is configured
    (then nothing is changed on it and the sync row is left out)."""
    import redis

    res: dict[str, Any] = {}
    with contextlib.ExitStack() as stack:
        if url is None:
            url = stack.enter_context(private_redis("everysec", workdir))
            res["note"] = "a private redis-server: AOF everysec; 'always' for sync"
        else:
            res["note"] = f"{url} as configured (nothing changed on it); no sync row"
        r = redis.Redis.from_url(url)
        key = f"bench:{uuid.uuid4().hex}"
        try:
            res["send_single"] = _timed(
                seconds, lambda: (r.xadd(key, {"b": BODY}), 1)[1]
            )

            def batch() -> int:
                p = r.pipeline(transaction=False)
                for _ in range(BATCH):
                    p.xadd(key, {"b": BODY})
                p.execute()
                return BATCH

            res["send_batch"] = _timed(seconds, batch)
            n = 0
            t0 = time.perf_counter()
            last = "-"
            while True:
                rows: Any = r.xrange(key, min=last, max="+", count=1000)
                if last != "-":
                    rows = rows[1:]
                if not rows:
                    break
                n += sum(len(f[b"b"]) > 0 for _, f in rows)
                last = rows[-1][0].decode()
            res["consume"] = n / (time.perf_counter() - t0)
            res["send_4proc"] = _processes(_redis_proc, (url, key, seconds))
        finally:
            r.delete(key)
    if "private" in res["note"]:
        # Redis has no per-write fsync short of appendfsync=always: its own
        # private server with that setting for the sync row.
        with private_redis("always", workdir) as sync_url:
            pool = redis.ConnectionPool.from_url(sync_url, max_connections=16)
            rc = redis.Redis(connection_pool=pool)
            key = f"bench:{uuid.uuid4().hex}"
            res["sync_group_commit_8"] = _threads(
                8, seconds, lambda: rc.xadd(key, {"b": BODY})
            )
    return res


# -- SQLite (WAL) -------------------------------------------------------------
def _sqlite_open(path: Path, synchronous: str = "NORMAL") -> sqlite3.Connection:
    con = sqlite3.connect(
        path, timeout=60, isolation_level=None, check_same_thread=False
    )
    con.execute("PRAGMA journal_mode=WAL")
    con.execute(f"PRAGMA synchronous={synchronous}")
    con.execute(
        "CREATE TABLE IF NOT EXISTS msg (id INTEGER PRIMARY KEY, topic TEXT, body BLOB)"
    )
    return con


def _sqlite_proc(path: str, seconds: float, start: Any, out: Any) -> None:
    con = _sqlite_open(Path(path))
    rows = [("Bench4", BODY)] * BATCH
    start.wait()

    def step() -> int:
        con.execute("BEGIN IMMEDIATE")
        con.executemany("INSERT INTO msg(topic, body) VALUES (?, ?)", rows)
        con.execute("COMMIT")
        return BATCH

    out.put(_timed(seconds, step))


def bench_sqlite(seconds: float, workdir: Path) -> dict[str, Any]:
    path = workdir / "sqlite.db"
    con = _sqlite_open(path)
    res: dict[str, Any] = {}
    ins = "INSERT INTO msg(topic, body) VALUES (?, ?)"
    res["send_single"] = _timed(
        seconds, lambda: (con.execute(ins, ("Bench", BODY)), 1)[1]
    )
    rows = [("Bench", BODY)] * BATCH

    def batch() -> int:
        con.execute("BEGIN")
        con.executemany(ins, rows)
        con.execute("COMMIT")
        return BATCH

    res["send_batch"] = _timed(seconds, batch)
    n = 0
    t0 = time.perf_counter()
    last = 0
    while True:
        got = con.execute(
            "SELECT id, body FROM msg WHERE id > ? AND topic = 'Bench' "
            "ORDER BY id LIMIT 1000",
            (last,),
        ).fetchall()
        if not got:
            break
        n += sum(len(b) > 0 for _, b in got)
        last = got[-1][0]
    res["consume"] = n / (time.perf_counter() - t0)
    res["send_4proc"] = _processes(_sqlite_proc, (str(path), seconds))
    con.close()
    spath = workdir / "sqlite_sync.db"
    conns = [_sqlite_open(spath, "FULL") for _ in range(8)]
    lock = threading.Lock()
    idx = iter(range(10**9))

    def one() -> None:
        with lock:
            c = conns[next(idx) % 8]
        c.execute(ins, ("Sync", BODY))

    res["sync_group_commit_8"] = _threads(8, seconds, one)
    return res


# -- report ----------------------------------------------------------------------------
def run(
    seconds: float, redis_url: str | None, workdir: Path | None = None
) -> dict[str, Any]:
    """Run every workload; return ``{"ours": ..., "redis": ..., "sqlite": ...}``.

    ``redis_url``: None for a private redis-server, a URL to measure that
    server as it is, "" to skip Redis."""
    tmp = Path(tempfile.mkdtemp(prefix="broker-bench-", dir=workdir))
    try:
        out: dict[str, Any] = {
            "seconds_per_workload": seconds,
            "body_bytes": len(BODY),
            "batch": BATCH,
            "cpus": os.cpu_count(),
            "notes": [
                "ours: Broker.open(..., index_in_background=False): the key index "
                "is built on query (or by the flusher when enabled)",
                f"send_4proc: 4 processes x batches of {BATCH}, aggregate",
                "sync_group_commit_8: 8 threads of one process, one send each "
                "at a time; redis row uses appendfsync=always, sqlite "
                "synchronous=FULL with 8 connections",
                "consume: pull 32 at a time and read each body (ours), XRANGE "
                "1000 (redis), SELECT 1000 (sqlite)",
            ],
        }
        out["ours"] = bench_ours(seconds, tmp)
        try:
            out["redis"] = (
                {} if redis_url == "" else bench_redis(seconds, redis_url or None, tmp)
            )
        except Exception as exc:  # Redis absent: report, do not fail the run
            out["redis"] = {"error": str(exc)}
        out["sqlite"] = bench_sqlite(seconds, tmp)
        return out
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def table(result: dict[str, Any]) -> str:
    """Return the results as a readable table with our ratio to each peer."""
    lines = [
        f"{'workload':<22}{'ours msg/s':>13}{'redis msg/s':>13}{'sqlite msg/s':>14}"
        f"{'x redis':>9}{'x sqlite':>10}"
    ]
    for w in WORKLOADS:
        o = result["ours"].get(w)
        r = result["redis"].get(w)
        s = result["sqlite"].get(w)

        def fmt(v: Any) -> str:
            return f"{v:,.0f}" if isinstance(v, int | float) else "-"

        def ratio(v: Any, o: Any = o) -> str:
            return f"{o / v:.2f}" if isinstance(v, int | float) and v and o else "-"

        lines.append(
            f"{w:<22}{fmt(o):>13}{fmt(r):>13}{fmt(s):>14}{ratio(r):>9}{ratio(s):>10}"
        )
    return "\n".join(lines)


def _open_probe(store: str) -> None:
    """Child process: open the store, print the open time and peak RSS, close."""
    from broker_core import Broker

    t0 = time.perf_counter()
    b = Broker.open(store, index_in_background=False)
    opened = time.perf_counter() - t0
    depth = sum(sum(t["depths"]) for t in b.stats()["topics"].values())
    # VmHWM (peak RSS of this address space); ru_maxrss would include the
    # parent's RSS at fork time, which Linux carries across exec.
    status = Path("/proc/self/status").read_text()
    rss_mib = int(status.split("VmHWM:")[1].split()[0]) / 1024
    b.close()
    print(
        json.dumps({"open_seconds": opened, "max_rss_mib": rss_mib, "messages": depth})
    )


def open_test(count: int, workdir: Path | None) -> dict[str, Any]:
    """Write ``count`` small messages, close, then time a fresh process's open."""
    import subprocess
    import sys

    from broker_core import Broker, Message

    tmp = Path(tempfile.mkdtemp(prefix="broker-open-", dir=workdir))
    try:
        t0 = time.perf_counter()
        with Broker.open(tmp, index_in_background=False) as b:
            batch = [Message("Big", b"0123456789abcdef") for _ in range(1024)]
            for _ in range(count // 1024):
                b.send_batch(batch)
            if count % 1024:
                b.send_batch(batch[: count % 1024])
        write_s = time.perf_counter() - t0
        root = str(Path(__file__).resolve().parents[1])
        code = (
            f"import sys; sys.path.insert(0, {root!r}); "
            f"from broker_core.benchmark import _open_probe; _open_probe({str(tmp)!r})"
        )
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True
        )
        res: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
        res["write_seconds"] = write_s
        res["log_bytes"] = sum(
            f.stat().st_blocks * 512 for f in (tmp / "commitlog").iterdir()
        )
        return res
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m broker_core bench", description=__doc__
    )
    ap.add_argument(
        "--seconds", type=float, default=3.0, help="duration of each workload"
    )
    ap.add_argument(
        "--redis",
        default=None,
        help="default: a private redis-server started for the run (its "
        "settings are the run's); a URL: that server as configured, nothing "
        "changed on it; '': skip Redis",
    )
    ap.add_argument("--workdir", default=None, help="where to put temporary stores")
    ap.add_argument(
        "--json", default=None, help="also write the JSON result to this file"
    )
    ap.add_argument(
        "--open-test",
        type=int,
        default=0,
        metavar="N",
        help="only: write N small messages, then time opening the store",
    )
    args = ap.parse_args(argv)
    if args.open_test:
        res = open_test(args.open_test, Path(args.workdir) if args.workdir else None)
        print(json.dumps(res, indent=2))
        return 0
    result = run(args.seconds, args.redis, Path(args.workdir) if args.workdir else None)
    print(table(result))
    text = json.dumps(result, indent=2, default=str)
    print(text)
    if args.json:
        Path(args.json).write_text(text)
    return 0
