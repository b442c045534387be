"""The cluster's part of the health banner (``console.core.alerts``): what an
operator must know on every page when the console manages a cluster.

One read of the route registry, with the banner's short timeouts: a registry
that does not answer, a broker name with no live master (its queues are
read-only, or gone from every route), a node the console expects
(``CLUSTER_NODES``) that is not registered, and a slave far behind its master.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import redis
from django.conf import settings

#: A slave this many bytes behind its master is worth a warning.
LAG_WARN_BYTES = 64 << 20


def cluster_alerts(timeout_s: float, alert: Any) -> list[Any]:
    """The cluster's alerts, built with ``alert(level, title, meaning,
    action)``; none when the console manages no cluster."""
    from broker_core.cluster import RouteRegistry

    cluster = getattr(settings, "BROKER_CLUSTER", "")
    if not cluster:
        return []
    url = getattr(settings, "REGISTRY_URL", "") or settings.REDIS_URL
    client = redis.Redis.from_url(
        url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s
    )
    try:
        nodes = RouteRegistry(url, cluster, client=client).nodes()
    except redis.RedisError as exc:
        return [
            alert(
                "error",
                "The route registry is unreachable",
                f"Clients cannot learn routes and nodes cannot register ({exc}); "
                "nodes keep serving the clients they have.",
                f"Start the registry's Redis at {url.split('@')[-1]}.",
            )
        ]
    out = []
    by_name: dict[str, list[Any]] = defaultdict(list)
    for n in nodes:
        by_name[n.name].append(n)
    for name in sorted(set(getattr(settings, "CLUSTER_NODES", []) or [])):
        if name not in by_name:
            out.append(
                alert(
                    "error",
                    f"Node {name} is not registered",
                    f"None of {name}'s brokers heartbeats in cluster {cluster}: "
                    "its queues are in no route, its messages unreachable.",
                    f"Start {name} (or its slave), or remove it from CLUSTER_NODES.",
                )
            )
    for name, members in sorted(by_name.items()):
        if any(m.is_master for m in members):
            continue
        out.append(
            alert(
                "error",
                f"{name} has no live master",
                f"Its slave serves reads only: sends to {name} fail, and its "
                "pending transactions and timers wait.",
                "Restart the master, or promote its slave on the Cluster page.",
            )
        )
    out += _slave_alerts(nodes, alert)
    limit = int(getattr(settings, "CLUSTER_LAG_WARN_BYTES", LAG_WARN_BYTES))
    for n in nodes:
        behind = n.master_log_end - n.log_end
        if not n.is_master and n.master_log_end and behind >= limit:
            out.append(
                alert(
                    "warning",
                    f"{n.key} is {_size(behind)} behind its master",
                    "A promotion now would lose what it has not copied.",
                    "Look at the replication link and the slave's disk on the "
                    "Cluster page.",
                )
            )
    return out


def _slave_alerts(nodes: list[Any], alert: Any) -> list[Any]:
    """A master's slave that is stalled (connected, acking nothing) or that
    disconnected (as the master sees it: a stalled slave also stops
    heartbeating, so it leaves the registry and no slave row is left)."""
    out = []
    for n in nodes:
        if not n.is_master:
            continue
        for s in n.slaves or []:
            who = s.get("node") or s.get("address") or "?"
            behind = _size(int(s.get("lag_bytes") or 0))
            if s.get("connected") and s.get("stalled_s"):
                out.append(
                    alert(
                        "warning",
                        f"The slave {who} of {n.name} is stalled",
                        f"It has acknowledged nothing for {s['stalled_s']:.0f} s "
                        f"and is {behind} behind. A SYNC master refuses sends "
                        "meanwhile; a promotion now would lose what it lacks.",
                        "Look at the slave's host: a paused process, a full disk, "
                        "or a saturated link.",
                    )
                )
            elif s.get("connected") is False:
                out.append(
                    alert(
                        "warning",
                        f"The slave {who} of {n.name} is disconnected",
                        f"It was {behind} behind when its link dropped. A SYNC "
                        "master refuses sends until a slave follows again.",
                        "Start the slave again, or check the network between it "
                        "and its master; the warning clears once it follows.",
                    )
                )
    return out


def _size(n: int) -> str:
    return f"{n:,} bytes" if n < 1 << 20 else f"{n / (1 << 20):,.0f} MiB"
