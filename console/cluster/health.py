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
    out += _cut_alerts(nodes, alert)
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


#: a cut tail is in the banner this long after the cut
CUT_ALERT_S = 24 * 3600


def _cut_alerts(nodes: list[Any], alert: Any) -> list[Any]:
    """A store that cut a tail on rejoining as a slave in the last day: the
    messages it had acknowledged as a master and its new master never had."""
    import time

    out = []
    now_ms = time.time() * 1000
    for n in nodes:
        for c in n.cut_tails or []:
            if now_ms - float(c.get("cut_at_ms") or 0) > CUT_ALERT_S * 1000:
                continue
            out.append(
                alert(
                    "error",
                    f"{n.key} lost {c.get('client_messages', 0):,} client messages "
                    "in a failover",
                    f"It took {c.get('messages', 0):,} records "
                    f"({_size(int(c.get('to', 0)) - int(c.get('from', 0)))}) as a "
                    "master that its new master never had (ASYNC replication), "
                    "and cut them when it rejoined as a slave.",
                    f"Their ids and keys are listed in {c.get('file')} on "
                    f"{n.key}'s host (the records beside it, .log): ask their "
                    "producers to send them again.",
                )
            )
    return out


def _size(n: int) -> str:
    return f"{n:,} bytes" if n < 1 << 20 else f"{n / (1 << 20):,.0f} MiB"
