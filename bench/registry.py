"""Where the route registry lives: Redis (today) against etcd (the
controller's store), measured as the nodes would use each.

    .venv/bin/python bench/registry.py [--nodes 3,12,48] [--topics 20]
        [--reads 300] [--redis redis://127.0.0.1:6379/11] [--json out.json]

The registry holds soft state: each node writes its registration (broker
name and id, role, endpoints, topics' queue counts; ``cluster.registry.
NodeInfo``) every ``expiry/3`` seconds with an expiry, and every node reads
all registrations to answer ``QueryRoute`` (cached for a second). The
question of who may write is etcd's already (``cluster.controller``); this
measures whether the routes should move there too.

For each node count, with ``--topics`` topics per node:

- **Redis**: ``RouteRegistry.register`` (GET + SET PX + SADD in one pipeline,
  PUBLISH when the shape changed) and ``RouteRegistry.nodes`` (SMEMBERS +
  MGET), on the Redis at ``--redis`` (a cluster name of its own; its keys are
  deleted at the end).
- **etcd**: a 3-member cluster on loopback (``tests/etcd.py``, Debian's
  etcd-server), through the project's own v3 JSON gateway client
  (``cluster.controller.Etcd``, as the controller uses it): a registration is
  a put of the same JSON under a lease of the expiry (one lease per node,
  granted once), and a read is one range over the cluster's prefix.

Reported: p50/p99 of each operation in ms, and the etcd members' CPU per
registration (their utime+stime from /proc over the write phase: every put
is a Raft round with an fsync on each member). Prints a table with the load
average and writes JSON (``--json``, else stdout).
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from broker_core.cluster.controller import Etcd  # noqa: E402
from broker_core.cluster.registry import (  # noqa: E402
    NodeInfo,
    RouteRegistry,
    TopicQueues,
)
from tests.etcd import EtcdCluster  # noqa: E402

EXPIRY_S = 10


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p / 100))]


def ms(xs: list[float]) -> dict[str, float]:
    return {
        "p50_ms": round(statistics.median(xs) * 1000, 3),
        "p99_ms": round(pct(xs, 99) * 1000, 3),
    }


def make_nodes(cluster: str, count: int, topics: int) -> list[NodeInfo]:
    out = []
    for i in range(count):
        out.append(
            NodeInfo(
                cluster=cluster,
                name=f"broker-{i // 2}",
                broker_id=i % 2,
                role="SYNC_MASTER" if i % 2 == 0 else "SLAVE",
                endpoints=[f"10.0.{i // 250}.{i % 250}:8081"],
                admin=f"https://10.0.{i // 250}.{i % 250}:9081",
                ha=f"10.0.{i // 250}.{i % 250}:10912",
                topics={f"topic-{t}": TopicQueues(8, 8) for t in range(topics)},
                log_end=123456789,
                epoch=3,
                epoch_id=uuid.uuid4().hex,
            )
        )
    return out


def cpu_s(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def bench_redis(url: str, nodes: list[NodeInfo], reads: int) -> dict:
    reg = RouteRegistry(url, nodes[0].cluster, expiry_s=EXPIRY_S)
    try:
        writes = []
        for _ in range(max(1, reads // len(nodes))):
            for n in nodes:
                t0 = time.perf_counter()
                reg.register(n)
                writes.append(time.perf_counter() - t0)
        got = []
        for _ in range(reads):
            t0 = time.perf_counter()
            seen = reg.nodes()
            got.append(time.perf_counter() - t0)
        assert len(seen) == len(nodes), (len(seen), len(nodes))
        return {"register": ms(writes), "read_all": ms(got)}
    finally:
        keys = list(reg.redis.scan_iter(f"{reg.prefix}:*"))
        if keys:
            reg.redis.delete(*keys)


def _prefix_end(prefix: str) -> str:
    raw = prefix.encode()
    return base64.b64encode(raw[:-1] + bytes([raw[-1] + 1])).decode()


def bench_etcd(etcd: Etcd, pids: list[int], nodes: list[NodeInfo], reads: int) -> dict:
    prefix = f"/bench-routes/{nodes[0].cluster}/"
    leases = {n.key: etcd.grant(EXPIRY_S) for n in nodes}
    try:
        writes = []
        before = cpu_s(pids)
        for _ in range(max(1, reads // len(nodes))):
            for n in nodes:
                t0 = time.perf_counter()
                etcd.txn(
                    [],
                    [
                        etcd.put_op(
                            prefix + n.key,
                            json.loads(n.to_json()),
                            lease=leases[n.key],
                        )
                    ],
                )
                writes.append(time.perf_counter() - t0)
        members_cpu = cpu_s(pids) - before
        got = []
        body = {
            "key": base64.b64encode(prefix.encode()).decode(),
            "range_end": _prefix_end(prefix),
        }
        for _ in range(reads):
            t0 = time.perf_counter()
            out = etcd.call("/v3/kv/range", body)
            seen = [
                NodeInfo.from_json(base64.b64decode(kv["value"]))
                for kv in out.get("kvs") or []
            ]
            got.append(time.perf_counter() - t0)
        assert len(seen) == len(nodes), (len(seen), len(nodes))
        return {
            "register": ms(writes),
            "read_all": ms(got),
            "members_cpu_ms_per_register": round(members_cpu * 1000 / len(writes), 3),
        }
    finally:
        for lease in leases.values():
            etcd.revoke(lease)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", default="3,12,48")
    ap.add_argument("--topics", type=int, default=20)
    ap.add_argument("--reads", type=int, default=300)
    ap.add_argument(
        "--redis", default=os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379/11"
    )
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    load0 = os.getloadavg()
    res: dict = {"topics_per_node": a.topics, "runs": []}
    with tempfile.TemporaryDirectory(prefix="bench-registry-") as tmp:
        cluster = EtcdCluster(Path(tmp), 3)
        try:
            etcd = Etcd.from_url(cluster.urls)
            pids = [p.pid for p in cluster.procs.values()]
            for count in [int(x) for x in a.nodes.split(",")]:
                nodes = make_nodes(f"bench-{uuid.uuid4().hex[:8]}", count, a.topics)
                size = sum(len(n.to_json()) for n in nodes)
                res["runs"].append(
                    {
                        "nodes": count,
                        "registration_bytes_each": size // count,
                        "redis": bench_redis(a.redis, nodes, a.reads),
                        "etcd": bench_etcd(etcd, pids, nodes, a.reads),
                    }
                )
        finally:
            cluster.close()
    res["load_average"] = {"start": load0, "end": os.getloadavg()}
    print(f"load average at start {load0}, at end {os.getloadavg()} (2 CPUs)")
    print(f"{'nodes':>5} {'bytes':>6} | {'register p50/p99 ms':>22} | "
          f"{'read all p50/p99 ms':>22} | etcd members' CPU per register")  # fmt: skip
    for r in res["runs"]:
        for kind in ("redis", "etcd"):
            x = r[kind]
            extra = (
                f"{x['members_cpu_ms_per_register']:.2f} ms" if kind == "etcd" else ""
            )
            print(
                f"{r['nodes']:>5} {r['registration_bytes_each']:>6} | {kind:>5} "
                f"{x['register']['p50_ms']:>7.2f} / {x['register']['p99_ms']:>7.2f} | "
                f"{x['read_all']['p50_ms']:>7.2f} / {x['read_all']['p99_ms']:>7.2f} | "
                f"{extra}"
            )
    text = json.dumps(res, indent=2)
    if a.json:
        Path(a.json).write_text(text)
    else:
        print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
