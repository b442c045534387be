"""p95 latency of the console's list pages and API lists at volume.

    python bench/console.py [--halves N] [--messages N] [--requests K] [--store DIR]

Builds a store through broker_core (messages with ``send_batch`` on a few topics,
pending halves with ``TransactionService.send_half``), points Django at it with a
temporary database, then times K requests per URL with Django's test client
(in-process, signed in as an operator). Prints a table and JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

URLS = [
    "/",
    "/transactions/",
    "/transactions/?producer_group=PID_bench_1&min_age=0",
    "/transactions/?page=2",
    "/transactions/?state=discarded",
    "/api/transactions/",
    "/api/transactions/?producer_group=PID_bench_2&min_checks=0",
    "/delays/",
    "/api/delay-levels/",
    "/topics/",
    "/api/topics/",
    "/topics/bench-0/",
    "/messages/?key=key-7",
    "/messages/?topic=bench-1&tag=TagA",
    "/api/messages/search/?topic=bench-1&tag=TagA",
    "/consumer-groups/",
    "/api/consumer-groups/",
    "/audit/",
    "/api/audit/",
]
TARGET_MS = 200.0


def build_store(store: Path, halves: int, messages: int) -> float:
    from broker_core import Broker, Message, TransactionService

    started = time.perf_counter()
    with Broker.open(str(store)) as broker:
        batch = 256
        for start in range(0, messages, batch):
            n = min(batch, messages - start)
            topic = f"bench-{(start // batch) % 4}"
            broker.send_batch(
                [
                    Message(
                        topic,
                        b"x" * 100,
                        tags="TagA" if i % 2 else "TagB",
                        keys=f"key-{start + i}",
                    )
                    for i in range(n)
                ]
            )
        with TransactionService(broker) as tx:
            for i in range(halves):
                tx.send_half(
                    f"PID_bench_{i % 4}",
                    Message(f"bench-{i % 4}", b"half", keys=f"tx-{i}"),
                )
            tx.refresh_index()
        for q in range(4):
            broker.commit_offset("CID_bench", "bench-0", q, 0)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--halves", type=int, default=1_000_000)
    parser.add_argument("--messages", type=int, default=10_000_000)
    parser.add_argument("--requests", type=int, default=30)
    parser.add_argument(
        "--store",
        type=Path,
        default=None,
        help="reuse (or build into) this store directory",
    )
    args = parser.parse_args()

    var = Path(tempfile.mkdtemp(prefix="bench-console-"))
    store = args.store or var / "store"
    build_s = 0.0
    if not (store / "commitlog").exists():
        build_s = build_store(store, args.halves, args.messages)

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

    call_command("migrate", verbosity=0)
    user = User.objects.create_user("bench-operator", password="bench-pass-123")
    user.groups.add(Group.objects.get(name="operator"))
    from console.topics.tasks import sync_store_tables

    sync_store_tables()
    client = Client()
    client.force_login(user)

    rows = []
    for url in URLS:
        client.get(url)  # warm caches and the index
        times, codes = [], set()
        for _ in range(args.requests):
            t0 = time.perf_counter()
            response = client.get(url)
            times.append((time.perf_counter() - t0) * 1000)
            codes.add(response.status_code)
        times.sort()
        p95 = times[max(0, int(len(times) * 0.95) - 1)]
        rows.append(
            {
                "url": url,
                "p50_ms": round(statistics.median(times), 1),
                "p95_ms": round(p95, 1),
                "max_ms": round(times[-1], 1),
                "status": sorted(codes),
                "ok": codes == {200} and p95 <= TARGET_MS,
            }
        )

    print(
        f"store: {args.messages:,} messages, {args.halves:,} pending halves; "
        f"built in {build_s:.0f} s"
        if build_s
        else f"store: reused {store}"
    )
    print(f"{'url':58} {'p50':>8} {'p95':>8} {'max':>8}  status  ok")
    for r in rows:
        print(
            f"{r['url']:58} {r['p50_ms']:8.1f} {r['p95_ms']:8.1f} {r['max_ms']:8.1f}"
            f"  {','.join(map(str, r['status'])):6}  {'yes' if r['ok'] else 'NO'}"
        )
    print(
        json.dumps(
            {
                "messages": args.messages,
                "halves": args.halves,
                "build_s": round(build_s, 1),
                "target_p95_ms": TARGET_MS,
                "rows": rows,
            }
        )
    )


if __name__ == "__main__":
    main()
