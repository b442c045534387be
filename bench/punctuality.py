"""End-to-end punctuality of delayed messages through the official Python client.

    .venv/bin/python bench/punctuality.py [--messages 200] [--spread 3.0]
        [--lead 3.0] [--celery] [--endpoint HOST:PORT] [--json out.json]

Starts ``python -m broker_core serve --embedded-timers`` on a temporary store;
with ``--celery`` the endpoint runs without timers and Celery delivers them as
``make run`` deploys it (a ``timers`` worker and beat, ``delays.deliver_due``
every second, Redis database 14, a temporary SQLite database); ``--endpoint``
uses one already running instead. Then a SimpleConsumer long-polls a new
topic while a Producer sends ``--messages`` messages with a delivery time
spread evenly over ``--spread`` seconds, the first ``--lead`` seconds ahead.
Lateness = the moment the consumer holds the message - its delivery time
(both on this host's clock), in ms; a negative value would be an early
delivery. Prints p50/p90/p99/max, the number early, and the load average.
Targets (issue 16): p50 <= 30 ms, p99 <= 100 ms, none early.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# This directory holds grpc.py: keep it off sys.path for the client's "import grpc".
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != ROOT / "bench"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


CELERY_REDIS = "redis://127.0.0.1:6379/14"


def start_celery(store: Path, tmp: Path, procs: list[subprocess.Popen]) -> None:
    """A timers worker and beat over ``store``, as the Procfile starts them;
    appended to ``procs`` as they start (the caller stops them)."""
    import redis

    redis.Redis.from_url(CELERY_REDIS).flushdb()  # this benchmark's own database
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "console.settings",
        "VAR_DIR": str(tmp),
        "DATABASE_URL": f"sqlite:///{tmp / 'db.sqlite3'}",
        "REDIS_URL": CELERY_REDIS,
        "BROKER_STORE_DIR": str(store),
    }
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "--noinput", "-v0"],
        cwd=ROOT, env=env, check=True,
    )  # fmt: skip
    celery = [sys.executable, "-m", "celery", "-A", "console"]
    for name, args in (
        ("worker", ["worker", "--loglevel", "INFO", "-Q", "timers,celery",
                    "--concurrency", "2", "-n", "bench-timers@%h"]),
        ("beat", ["beat", "-s", str(tmp / "beat-schedule")]),
    ):  # fmt: skip
        log = open(tmp / f"{name}.log", "w")  # noqa: SIM115 - the process owns it
        procs.append(
            subprocess.Popen(
                [*celery, *args],
                cwd=ROOT,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )  # fmt: skip
        )
    deadline = time.monotonic() + 60
    while "ready" not in (tmp / "worker.log").read_text():
        if time.monotonic() > deadline:
            raise SystemExit(
                "the Celery worker did not start: "
                + (tmp / "worker.log").read_text()[-2000:]
            )
        time.sleep(0.2)
    time.sleep(2)  # beat's first ticks


def start_endpoint(store: Path, timers: bool = True) -> tuple[subprocess.Popen, str]:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "broker_core", "serve", "--store", str(store),
         "--listen", f"127.0.0.1:{port}", "--no-redis-relay",
         *(["--embedded-timers"] if timers else [])],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return proc, f"127.0.0.1:{port}"
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                err = proc.stderr.read() if proc.stderr else b""
                raise SystemExit(f"endpoint did not start: {err!r}") from None
            time.sleep(0.1)


def pct(sorted_ms: list[float], p: float) -> float:
    i = min(len(sorted_ms) - 1, max(0, round(p / 100 * len(sorted_ms)) - 1))
    return sorted_ms[i]


def run(
    endpoint: str, n: int, spread: float, lead: float, store: Path | None = None
) -> dict:
    from rocketmq import (
        ClientConfiguration,
        Credentials,
        FilterExpression,
        Message,
        Producer,
        SimpleConsumer,
    )

    topic = f"Punctual{uuid.uuid4().hex[:8]}"
    if store is not None:
        # Delayed messages need a DELAY topic (an endpoint of one's own given
        # with --endpoint: one made on first use takes them only with
        # serve --no-topic-type-check).
        subprocess.run(
            [sys.executable, "-m", "broker_core", "topic", "create", str(store),
             topic, "--type", "DELAY"],
            cwd=ROOT, check=True, stdout=subprocess.DEVNULL,
        )  # fmt: skip
    cfg = ClientConfiguration(endpoint, Credentials())
    producer = Producer(cfg, (topic,))
    producer.startup()
    consumer = SimpleConsumer(
        cfg, f"GID_{topic}", {topic: FilterExpression()}, await_duration=20
    )
    consumer.startup()
    late: dict[str, float] = {}
    stop = threading.Event()

    def receive() -> None:
        while not stop.is_set() and len(late) < n:
            try:
                got = consumer.receive(32, 15)
            except Exception:  # noqa: BLE001 - "no new message" after a long poll
                continue
            now = time.time() * 1000
            for m in got:
                due = int(m.properties.get("bench_due", "0"))
                late[m.message_id] = now - due
                consumer.ack(m)

    t = threading.Thread(target=receive, daemon=True)
    t.start()
    time.sleep(1.0)  # the consumer's first long poll is waiting
    start = time.time() * 1000 + lead * 1000
    for i in range(n):
        due = int(start + i * spread * 1000 / max(1, n - 1))
        m = Message()
        m.topic = topic
        m.body = b"x" * 64
        m.delivery_timestamp = due
        m.add_property("bench_due", str(due))
        producer.send(m)
    t.join(timeout=lead + spread + 30)
    stop.set()
    for closer in (consumer.shutdown, producer.shutdown):
        try:
            closer()
        except Exception:  # noqa: BLE001
            pass
    values = sorted(late.values())
    if not values:
        return {"received": 0, "sent": n}
    return {
        "sent": n,
        "received": len(values),
        "early": sum(1 for v in values if v < 0),
        "min_ms": round(values[0], 1),
        "p50_ms": round(pct(values, 50), 1),
        "p90_ms": round(pct(values, 90), 1),
        "p99_ms": round(pct(values, 99), 1),
        "max_ms": round(values[-1], 1),
    }


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--messages", type=int, default=200)
    ap.add_argument("--spread", type=float, default=3.0)
    ap.add_argument("--lead", type=float, default=3.0)
    ap.add_argument("--endpoint", default=None, help="an endpoint already running")
    ap.add_argument(
        "--celery", action="store_true", help="timers delivered by Celery beat"
    )
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-punctual-"))
    procs: list[subprocess.Popen] = []
    load_before = os.getloadavg()
    try:
        if args.endpoint:
            endpoint = args.endpoint
        else:
            proc, endpoint = start_endpoint(tmp / "store", timers=not args.celery)
            procs.append(proc)
            if args.celery:
                start_celery(tmp / "store", tmp, procs)
        res = run(
            endpoint,
            args.messages,
            args.spread,
            args.lead,
            None if args.endpoint else tmp / "store",
        )
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
        if args.celery:
            import redis

            redis.Redis.from_url(CELERY_REDIS).flushdb()
        if not os.environ.get("BENCH_KEEP"):
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            print("kept", tmp)
    res["endpoint"] = args.endpoint or (
        "Celery beat + timers worker" if args.celery else "serve --embedded-timers"
    )
    res["load_before"] = [round(x, 2) for x in load_before]
    res["load_after"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps(res, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1))
    ok = (
        res.get("received") == args.messages
        and res.get("early", 1) == 0
        and res["p50_ms"] <= 30
        and res["p99_ms"] <= 100
    )
    verdict = "met" if ok else "NOT met"
    print("targets (p50 <= 30 ms, p99 <= 100 ms, none early):", verdict)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
