"""Replication benchmark: a master appending at full speed with a slave following.

Usage: python bench/replication.py [--messages 300000] [--batch 32] [--size 1024]
[--rate MSG_PER_S] [--sync-sends 2000] [--tls] [--dir DIR] [--json out.json]

Three runs on fresh stores, the slave always in its own process
(``python -m broker_core replicate``) over loopback:

1. the master appends alone (no HA server): its append rate;
2. the master appends with a slave following: its append rate, and the
   replication lag sampled every 10 ms in the master (bytes: master end minus
   the slave's acked end; ms: age of the oldest byte not yet acked);
3. a fresh slave catches up with run 2's finished log: the slave's apply rate;
   then single sends each waiting for ``wait_replicated`` (a SYNC_MASTER send).

``--rate`` paces run 2 (msg/s) to see the lag under a load the pair sustains.
``--tls`` runs the link over TLS (a self-signed certificate made with openssl;
the slave trusts it with ``--ha-tls-ca``).

Prints the load average before and after (the figures depend on it) and a
table, then the JSON result.
"""

from __future__ import annotations

import argparse
import bisect
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from broker_core import Broker, Message  # noqa: E402
from broker_core.ha import start_ha_server  # noqa: E402

SECRET = b"bench-replication-secret-0123456"
SETTINGS: dict[str, Any] = {"segment_size": 256 << 20, "flush_interval_ms": 500}


def _percentile(xs: list[float], p: float) -> float:
    if not xs:
        return 0.0
    s = sorted(xs)
    return s[min(len(s) - 1, int(p / 100 * len(s)))]


def _append(
    b: Broker, n: int, batch: int, size: int, marks: list | None, rate: float = 0
) -> float:
    """Append ``n`` messages (at ``rate`` msg/s, 0: full speed); return seconds.
    ``marks`` gets (time, log end) after each batch."""
    body = os.urandom(size)
    if b.store.topic_config("Bench") is None:
        b.create_topic("Bench", 8)
    msgs = [Message("Bench", body, queue_id=q % 8) for q in range(batch)]
    t0 = time.perf_counter()
    store = b.store
    for k in range(n // batch):
        if rate:
            ahead = t0 + k * batch / rate - time.perf_counter()
            if ahead > 0:
                time.sleep(ahead)
        b.send_batch(msgs)
        if marks is not None:
            marks.append((time.perf_counter(), store.max_physical_offset()))
    return time.perf_counter() - t0


def _slave(
    store: Path, master: str, secret: Path, ca: Path | None = None
) -> subprocess.Popen[bytes]:
    tls = ["--ha-tls-ca", str(ca)] if ca is not None else []
    return subprocess.Popen(
        [sys.executable, "-m", "broker_core", "replicate", str(store),
         "--master", master, "--secret-file", str(secret),
         "--store-config", json.dumps(SETTINGS), *tls],
        cwd=ROOT,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip


def _certificate(base: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 (``--tls``), by openssl."""
    cert, key = base / "ha.pem", base / "ha.key"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-keyout", str(key), "-out", str(cert), "-subj", "/CN=bench-ha",
         "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True, capture_output=True,
    )  # fmt: skip
    return cert, key


def _wait_acked(srv: Any, end: int, timeout: float) -> float:
    t0 = time.perf_counter()
    if not srv.wait_replicated(end, timeout):
        raise SystemExit(f"the slave did not reach {end} in {timeout}s")
    return time.perf_counter() - t0


def _wait_connected(srv: Any, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not srv.replication_status():
        if time.monotonic() > deadline:
            raise SystemExit("the slave did not connect")
        time.sleep(0.01)


def run(args: argparse.Namespace) -> dict[str, Any]:
    base = Path(args.dir or tempfile.mkdtemp(prefix="bench-repl-"))
    base.mkdir(parents=True, exist_ok=True)
    secret = base / "secret"
    secret.write_bytes(SECRET)
    n, batch, size = args.messages, args.batch, args.size
    res: dict[str, Any] = {
        "messages": n, "batch": batch, "body_bytes": size, "rate": args.rate,
        "tls": args.tls, "loadavg_before": os.getloadavg(), "cpus": os.cpu_count(),
    }  # fmt: skip
    ca: Path | None = None
    tls: Any = None
    if args.tls:
        from broker_core.ha.tls import server_context

        ca, key = _certificate(base)
        tls = server_context(str(ca), str(key))
    try:
        # 1. alone
        with Broker.open(base / "alone", **SETTINGS) as b:
            secs = _append(b, n, batch, size, None)
            nbytes = b.store.max_physical_offset()
        res["alone"] = {"msgs_per_s": n / secs, "mb_per_s": nbytes / secs / 1e6}
        shutil.rmtree(base / "alone")

        # 2. with a slave following
        with Broker.open(base / "master", **SETTINGS) as b:
            srv = start_ha_server(b.store, "127.0.0.1:0", SECRET, tls=tls)
            slave = _slave(base / "slave", srv.address, secret, ca)
            try:
                _wait_connected(srv)
                marks: list[tuple[float, int]] = []
                samples: list[tuple[int, float]] = []
                stop = threading.Event()

                def sample() -> None:
                    while not stop.wait(0.01):
                        st = srv.replication_status()
                        if not st:
                            continue
                        now = time.perf_counter()
                        acked, end = st[0]["acked_offset"], st[0]["master_offset"]
                        lag_ms = 0.0
                        if acked < end and marks:
                            # The first append whose end passed the acked end.
                            ends = [e for _, e in marks]
                            i = bisect.bisect_right(ends, acked)
                            if i < len(marks):
                                lag_ms = (now - marks[i][0]) * 1000
                        samples.append((max(0, end - acked), lag_ms))

                t = threading.Thread(target=sample, daemon=True)
                t.start()
                secs = _append(b, n, batch, size, marks, args.rate)
                end = b.store.max_physical_offset()
                drain = _wait_acked(srv, end, 600)
                stop.set()
                t.join()
            finally:
                slave.terminate()
                slave.wait(timeout=60)
                srv.stop()
        lag_b = [float(x) for x, _ in samples]
        lag_ms = [y for _, y in samples]
        res["with_slave"] = {
            "msgs_per_s": n / secs,
            "mb_per_s": end / secs / 1e6,
            "drain_after_last_append_s": drain,
            "samples": len(samples),
            "lag_bytes": {"p50": _percentile(lag_b, 50), "p99": _percentile(lag_b, 99),
                          "max": max(lag_b, default=0.0)},
            "lag_ms": {"p50": _percentile(lag_ms, 50), "p99": _percentile(lag_ms, 99),
                       "max": max(lag_ms, default=0.0)},
        }  # fmt: skip
        shutil.rmtree(base / "slave")

        # 3. a fresh slave catches up with the finished log
        with Broker.open(base / "master", **SETTINGS) as b:
            srv = start_ha_server(b.store, "127.0.0.1:0", SECRET, tls=tls)
            end = b.store.max_physical_offset()
            t0 = time.perf_counter()
            slave = _slave(base / "slave2", srv.address, secret, ca)
            try:
                _wait_connected(srv)
                t1 = time.perf_counter()
                _wait_acked(srv, end, 600)
                t2 = time.perf_counter()
                # SYNC_MASTER: one send, then wait until the slave has it.
                lat = []
                for i in range(args.sync_sends):
                    t = time.perf_counter()
                    r = b.send(Message("Bench", b"sync-%d" % i, queue_id=0))
                    if not srv.wait_replicated(r.commit_log_offset + 1, 5.0):
                        raise SystemExit("a sync send was not replicated in 5 s")
                    lat.append((time.perf_counter() - t) * 1000)
            finally:
                slave.terminate()
                slave.wait(timeout=60)
                srv.stop()
        res["catch_up"] = {
            "seconds": t2 - t1,
            "start_to_connected_s": t1 - t0,
            "msgs_per_s": n / (t2 - t1),
            "mb_per_s": end / (t2 - t1) / 1e6,
        }
        res["sync_send_ms"] = {
            "sends": len(lat),
            "p50": _percentile(lat, 50),
            "p99": _percentile(lat, 99),
            "max": max(lat, default=0.0),
        }
    finally:
        res["loadavg_after"] = os.getloadavg()
        if not args.dir:
            shutil.rmtree(base, ignore_errors=True)
    return res


def _rate(label: str, r: dict[str, float]) -> str:
    return f"{label:<29}{r['msgs_per_s']:>10,.0f} msg/s {r['mb_per_s']:>7.1f} MB/s"


def _pcts(label: str, r: dict[str, float], fmt: str) -> str:
    return f"{label:<10} " + "  ".join(
        f"{k} {format(r[k], fmt):>12}" for k in ("p50", "p99", "max")
    )


def _table(r: dict[str, Any]) -> str:
    a, w, c = r["alone"], r["with_slave"], r["catch_up"]
    lb, lm = w["lag_bytes"], w["lag_ms"]
    rows = [
        f"{r['messages']} messages of {r['body_bytes']} B in batches of {r['batch']}, "
        f"{r['cpus']} CPUs, load average before {r['loadavg_before'][0]:.2f} "
        f"after {r['loadavg_after'][0]:.2f}",
        _rate("master append, no slave", a),
        _rate("master append, slave follows", w)
        + f"  ({w['msgs_per_s'] / a['msgs_per_s']:.2f}x)",
        _rate("slave apply (catch-up)", c),
        _pcts("lag bytes", lb, ",.0f"),
        _pcts("lag ms", lm, ".1f"),
        _pcts("sync send", r["sync_send_ms"], ".2f")
        + f"  ms: send + wait_replicated, {r['sync_send_ms']['sends']} sends",
        f"slave done {w['drain_after_last_append_s'] * 1000:.0f} ms after the last "
        f"append ({w['samples']} samples)",
    ]  # fmt: skip
    return "\n".join(rows)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=300_000)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument(
        "--rate", type=float, default=0, help="msg/s of run 2 (0: full speed)"
    )
    ap.add_argument("--sync-sends", type=int, default=2000)
    ap.add_argument(
        "--tls", action="store_true", help="the link over TLS (a self-signed cert)"
    )
    ap.add_argument("--dir", default=None, help="work directory (kept)")
    ap.add_argument("--json", default=None, help="also write the result here")
    args = ap.parse_args(argv)
    res = run(args)
    print(_table(res))
    print(json.dumps(res, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
