"""p95 latency of the console's list pages and API lists at volume (issue 7).

    python bench/console.py [--halves N] [--messages N] [--requests K]
                            [--store DIR] [--keep] [--profile URL] [--url URL ...]
                            [--via-admin]

Builds a store through broker_core (defaults: 10,000,000 messages with
``Broker.send_batch`` over four topics, 1% of them parked on the 18 delay levels
and as timers; 1,000,000 pending halves with ``TransactionService.send_half``,
plus 1% more halves discarded by a check run at a clock past the retention;
consumer groups with lag), points Django at it with a temporary SQLite database
(100,000 audit records), syncs the console tables as ``topics.sync`` does,
then times K requests per URL with Django's test client (in-process, signed in
as an operator) after two warm-up requests. Prints a table and JSON; a non-200
answer is an error row. Exit status 1 if any URL errs or misses 200 ms p95.

``--store DIR`` reuses a store built earlier (or builds into DIR); ``--keep``
keeps the temporary directory (store and database) and prints its path.
``--profile URL`` prints a cProfile of one request to URL after the table;
``--url URL`` (repeatable) times only the given URLs. ``--via-admin`` starts
``serve --admin-listen`` over the store and points the console at it
(``BROKER_ADMIN_URL``), as ``make run`` deploys it: every store operation of a
page is then an HTTP call to the node's admin API.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import math
import os
import pstats
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

TARGET_MS = 200.0
TOPICS = [f"bench-{i}" for i in range(4)]
GROUPS = [f"PID_bench_{i}" for i in range(4)]
CONSUMERS = [f"CID_bench_{i}" for i in range(6)]
BATCH = 512
AUDIT_ROWS = 100_000


def urls(halves: int, messages: int) -> list[str]:
    """Every list page and API list, with the filters an operator uses."""
    key = f"key-{messages // 2}"  # a plain message's key, mid-log
    tx_key = f"tx-{halves // 2}"  # a pending half's key
    return [
        "/",
        "/transactions/",
        "/transactions/?page=2",
        "/transactions/?producer_group=PID_bench_1&min_age_minutes=0.05",
        "/transactions/?topic=bench-2&min_checks=0&sort=-born",
        f"/transactions/?key={tx_key}",
        "/transactions/discarded/",
        "/api/transactions/",
        "/api/transactions/?producer_group=PID_bench_2&min_age_minutes=0.05&page=2",
        "/api/transactions/?state=DISCARDED",
        "/delays/",
        "/delays/scheduled/",
        "/api/delay-levels/",
        "/api/delay-scheduled/",
        "/topics/",
        "/api/topics/",
        "/topics/bench-0/",
        "/topics/bench-0/queues/0/",
        "/topics/bench-0/queues/0/?offset=100000",
        f"/messages/?key={key}",
        f"/messages/?topic=bench-1&key={key}",
        "/messages/?topic=bench-1&tag=TagA",
        f"/api/messages/search/?key={key}",
        "/api/messages/search/?topic=bench-1&tag=TagA",
        "/consumer-groups/",
        "/api/consumer-groups/",
        "/producer-groups/",
        "/audit/",
        "/audit/?q=bench-7",
        "/api/audit/",
        "/api/audit/?action=topic.update",
    ]


def _messages(start: int, n: int, topic: str, props=None):
    from broker_core import Message

    return [
        Message(
            topic,
            b"x" * 100,
            tags="TagA" if (start + i) % 2 else "TagB",
            keys=f"key-{start + i}",
            properties=props(start + i) if props else None,
        )
        for i in range(n)
    ]


def build_store(store: Path, halves: int, messages: int) -> dict[str, float]:
    """Fill ``store``; return the seconds each phase took."""
    from broker_core import Broker
    from broker_core.message import Message
    from broker_core.schedule import DelayService, install_send_hook
    from broker_core.transaction import TransactionService

    delayed = messages // 100
    plain = messages - delayed
    discarded = halves // 100
    phases: dict[str, float] = {}
    t0 = time.perf_counter()
    with Broker.open(str(store)) as broker:
        for name in TOPICS:
            broker.create_topic(name, read_queue_nums=4)
        for i, start in enumerate(range(0, plain, BATCH)):
            n = min(BATCH, plain - start)
            broker.send_batch(_messages(start, n, TOPICS[i % len(TOPICS)]))
        phases["messages_s"] = time.perf_counter() - t0

        t = time.perf_counter()
        install_send_hook(broker)

        def delay_props(j: int) -> dict[str, str]:
            if j % 4 == 3:  # a timer one hour to a few days out
                return {"TIMER_DELAY_MS": str(3_600_000 * (1 + j % 72))}
            return {"DELAY": str(1 + j % 18)}

        for i, start in enumerate(range(plain, messages, BATCH)):
            n = min(BATCH, messages - start)
            broker.send_batch(_messages(start, n, TOPICS[i % len(TOPICS)], delay_props))
        phases["delayed_s"] = time.perf_counter() - t

        t = time.perf_counter()
        with TransactionService(broker) as tx:
            # Discarded halves: sent first, then one check run at a clock past
            # file_reserved_hours discards them all ("file retention").
            for i in range(discarded):
                tx.send_half(
                    GROUPS[i % 4],
                    Message(TOPICS[i % 4], b"half", keys=f"tx-discarded-{i}"),
                )
            if discarded:
                future = int(time.time() * 1000) + 100 * 3_600_000
                while True:
                    r = tx.run_check(now_ms=future, time_budget_s=600)
                    if r.status.name != "BUDGET_EXHAUSTED":
                        break
            for i in range(halves):
                tx.send_half(
                    GROUPS[i % 4], Message(TOPICS[i % 4], b"half", keys=f"tx-{i}")
                )
            phases["halves_s"] = time.perf_counter() - t
            t = time.perf_counter()
            tx.refresh_index()
            m = tx.metrics()
            phases["index_s"] = time.perf_counter() - t
            if m.pending != halves or m.discarded != discarded:
                raise SystemExit(
                    f"build check failed: {m.pending} pending (want {halves}), "
                    f"{m.discarded} discarded (want {discarded})"
                )
        # Consumer groups with lag: each has consumed half of each queue.
        store_ = broker.store
        for g, group in enumerate(CONSUMERS):
            for name in TOPICS[: 1 + g % 4]:
                for q in range(4):
                    broker.commit_offset(
                        group, name, q, store_.max_offset(name, q) // (2 + g)
                    )
        # One pass of the delivery task (Celery beat runs ``delays.deliver_due``
        # every second in a deployment): it persists the schedule's progress,
        # which readers (stats, browsing) replay the log from.
        t = time.perf_counter()
        delays = DelayService(broker)
        phases["delivered"] = delays.deliver_due().delivered
        delays.close()
        phases["deliver_s"] = time.perf_counter() - t
    phases["total_s"] = time.perf_counter() - t0
    return {k: round(v, 1) for k, v in phases.items()}


def seed_audit(rows: int) -> None:
    """Audit records as the console writes them (bulk, not through actions)."""
    from console.audit.models import AuditRecord

    actions = ["topic.update", "transaction.rollback", "delay.cancel", "offset.reset"]
    AuditRecord.objects.bulk_create(
        (
            AuditRecord(
                actor_username=f"operator-{i % 7}",
                action=actions[i % 4],
                object_type=actions[i % 4].split(".")[0],
                object_id=f"bench-{i % 1000}",
                reason="bench",
                before={"n": i},
                after={"n": i + 1},
                status="success",
            )
            for i in range(rows)
        ),
        batch_size=5000,
    )


def percentile(sorted_ms: list[float], p: float) -> float:
    """Nearest-rank percentile."""
    return sorted_ms[max(0, math.ceil(p / 100 * len(sorted_ms)) - 1)]


def time_url(client, url: str, k: int) -> dict:
    codes: dict[int, int] = {}
    count = None
    for _ in range(2):  # warm caches, the index and the page cache
        client.get(url)
    times = []
    for _ in range(k):
        t0 = time.perf_counter()
        response = client.get(url)
        times.append((time.perf_counter() - t0) * 1000)
        codes[response.status_code] = codes.get(response.status_code, 0) + 1
    if url.startswith("/api/") and response.status_code == 200:
        data = response.json()
        if isinstance(data, dict) and "count" in data:
            count = data["count"]
        elif isinstance(data, dict) and "results" in data:
            count = len(data["results"])
        elif isinstance(data, list):
            count = len(data)
    times.sort()
    p95 = percentile(times, 95)
    error = set(codes) != {200}
    return {
        "url": url,
        "p50_ms": round(statistics.median(times), 1),
        "p95_ms": round(p95, 1),
        "max_ms": round(times[-1], 1),
        "status": codes,
        "api_count": count,
        "error": error,
        "ok": not error and p95 <= TARGET_MS,
    }


def profile(client, url: str) -> str:
    client.get(url)
    prof = cProfile.Profile()
    prof.enable()
    client.get(url)
    prof.disable()
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("cumulative").print_stats(30)
    return out.getvalue()


def start_node(store: Path, var: Path):  # type: ignore[no-untyped-def]
    """``serve --admin-listen`` over ``store``; sets the console's
    ``BROKER_ADMIN_URL`` and token file. Returns the process."""
    import secrets
    import socket
    import subprocess

    def port() -> int:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]

    token = var / "admin_token"
    token.write_text(secrets.token_urlsafe(24))
    admin = f"127.0.0.1:{port()}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "broker_core", "serve", "--store", str(store),
         "--listen", f"127.0.0.1:{port()}", "--no-redis-relay",
         "--admin-listen", admin, "--admin-token-file", str(token)],
        cwd=ROOT, stdout=open(var / "serve.log", "w"), stderr=subprocess.STDOUT,
    )  # fmt: skip
    end = time.time() + 120
    host, _, p = admin.rpartition(":")
    while True:
        try:
            socket.create_connection((host, int(p)), 0.2).close()
            break
        except OSError:
            if proc.poll() is not None or time.time() > end:
                msg = f"serve did not start: see {var / 'serve.log'}"
                raise SystemExit(msg) from None
            time.sleep(0.2)
    os.environ.update(
        BROKER_ADMIN_URL=f"http://{admin}", CLUSTER_ADMIN_TOKEN_FILE=str(token)
    )
    print(f"console through the admin API of serve at {admin}", flush=True)
    return proc


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--halves", type=int, default=1_000_000)
    parser.add_argument("--messages", type=int, default=10_000_000)
    parser.add_argument("--requests", type=int, default=30)
    parser.add_argument(
        "--store", type=Path, default=None, help="reuse (or build into) this store"
    )
    parser.add_argument(
        "--keep", action="store_true", help="keep the temporary directory"
    )
    parser.add_argument("--profile", default=None, help="cProfile one request")
    parser.add_argument(
        "--url", action="append", default=None, help="time only this URL (repeat)"
    )
    parser.add_argument(
        "--via-admin",
        action="store_true",
        help="the console reaches the store through a node's admin API",
    )
    args = parser.parse_args()
    node = None

    var = Path(tempfile.mkdtemp(prefix="bench-console-"))
    store = (args.store or var / "store").resolve()
    phases: dict[str, float] = {}
    try:
        if (store / "commitlog").exists():
            print(f"reusing store {store} (sizes as given by --halves/--messages)")
        else:
            store.mkdir(parents=True, exist_ok=True)
            print(
                f"building {args.messages:,} messages and {args.halves:,} pending "
                f"halves in {store} ...",
                flush=True,
            )
            phases = build_store(store, args.halves, args.messages)
            print(f"built: {phases}", flush=True)

        if args.via_admin:
            node = start_node(store, var)
        os.environ.update(
            DJANGO_SETTINGS_MODULE="console.settings",
            VAR_DIR=str(var),
            BROKER_STORE_DIR=str(store),
            DATABASE_URL=f"sqlite:///{var / 'db.sqlite3'}",
            ALLOWED_HOSTS="testserver",
            LOG_LEVEL="WARNING",
        )
        import django

        django.setup()
        from django.contrib.auth.models import Group, User
        from django.core.management import call_command
        from django.test import Client

        t = time.perf_counter()
        call_command("migrate", verbosity=0)
        users = {}
        for role in ("viewer", "operator", "admin"):
            users[role] = User.objects.create_user(
                f"bench-{role}", password="bench-pass-123"
            )
            users[role].groups.add(Group.objects.get(name=role))
        seed_audit(AUDIT_ROWS)
        from console.topics.tasks import sync_store_tables

        synced = sync_store_tables()
        setup_s = round(time.perf_counter() - t, 1)
        print(f"console set up in {setup_s} s; synced {synced}", flush=True)

        client = Client()
        client.force_login(users["operator"])
        rows = []
        for url in args.url or urls(args.halves, args.messages):
            rows.append(time_url(client, url, args.requests))
            r = rows[-1]
            print(f"  {url}: p95 {r['p95_ms']} ms {r['status']}", flush=True)

        size = (
            f"{args.messages:,} messages (1% delayed), {args.halves:,} pending "
            f"halves (+{args.halves // 100:,} discarded), {AUDIT_ROWS:,} audit rows"
        )
        print()
        print(size)
        if phases:
            print(f"build: {phases['total_s']:.0f} s ({phases})")
        else:
            print(f"store reused: {store}")
        print(f"{args.requests} requests per URL after 2 warm-up, operator, in-process")
        w = max(len(r["url"]) for r in rows)
        print(f"{'url':{w}} {'p50':>7} {'p95':>7} {'max':>7}  status  count      ok")
        for r in rows:
            status = ",".join(f"{c}" for c in sorted(r["status"]))
            verdict = "ERROR" if r["error"] else ("pass" if r["ok"] else "FAIL")
            count = "" if r["api_count"] is None else f"{r['api_count']:,}"
            print(
                f"{r['url']:{w}} {r['p50_ms']:7.1f} {r['p95_ms']:7.1f} "
                f"{r['max_ms']:7.1f}  {status:6}  {count:>9}  {verdict}"
            )
        failed = [r["url"] for r in rows if not r["ok"]]
        print(f"{len(rows) - len(failed)}/{len(rows)} pass; fail/error: {failed}")
        print(
            json.dumps(
                {
                    "messages": args.messages,
                    "halves": args.halves,
                    "discarded": args.halves // 100,
                    "audit_rows": AUDIT_ROWS,
                    "requests": args.requests,
                    "build": phases or None,
                    "console_setup_s": setup_s,
                    "target_p95_ms": TARGET_MS,
                    "rows": rows,
                }
            )
        )
        if args.profile:
            print(profile(client, args.profile))
        return 1 if failed else 0
    finally:
        if "console.brokerlink" in sys.modules:
            sys.modules["console.brokerlink"].close_broker()
        if node is not None:
            node.terminate()
            node.wait(timeout=30)
        if args.keep:
            print(f"kept {var}")
        else:
            shutil.rmtree(var, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
