"""What an operator must know on every page: the health banner.

Each check says what is wrong, what it means for the broker and what to do.
The answer is kept for ``HEALTH_BANNER_TTL`` seconds (5) per console process and every
probe has a short timeout, so pages stay fast even while Redis or the endpoint
is down. Nothing here scans the store: stuck halves are counted by the periodic
transaction check, which publishes the counts in Redis.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Any

import redis
from django.conf import settings

from console.core.health import beat_stale_after, check_grpc

log = logging.getLogger(__name__)

PROBE_TIMEOUT_S = 0.3
#: Tasks waiting on the timers queue before the banner calls it a backlog.
TIMERS_BACKLOG = 20


@dataclass(frozen=True, slots=True)
class Alert:
    level: str  # "error" or "warning"
    title: str
    meaning: str
    action: str


def _redis() -> redis.Redis:
    return redis.Redis.from_url(
        settings.REDIS_URL,
        socket_timeout=PROBE_TIMEOUT_S,
        socket_connect_timeout=PROBE_TIMEOUT_S,
    )


def _background() -> list[Alert]:
    from console.core.liveness import BEAT_ALIVE_KEY, timers_workers

    try:
        r = _redis()
        raw = r.get(BEAT_ALIVE_KEY)
        waiting = int(r.llen("timers"))
        workers = timers_workers()
    except redis.RedisError as exc:
        return [
            Alert(
                "error",
                "Redis is unreachable",
                "No background work runs: the transaction check, delayed "
                f"deliveries and reports have stopped ({exc}).",
                f"Start Redis at {settings.REDIS_URL.split('@')[-1]}; the work "
                "resumes by itself, nothing is lost.",
            )
        ]
    out = []
    # Each process says it is alive by itself (console/core/liveness.py), so
    # a stopped worker is never reported as beat, nor as a backlog.
    if not workers:
        out.append(
            Alert(
                "error",
                "The timers worker is not running",
                f"{waiting} background tasks are waiting: check-backs and "
                "delayed deliveries are not happening.",
                "Start the Celery worker for the timers queue (Procfile: "
                "worker). Waiting ticks expire; the next ones catch up.",
            )
        )
    age = None if raw is None else time.time() - float(raw)
    if age is None or age > beat_stale_after():
        since = "never" if age is None else f"{age:.0f} s ago"
        out.append(
            Alert(
                "error",
                "Celery beat is not running",
                f"Nothing schedules the transaction check or delayed "
                f"deliveries (last tick {since}).",
                "Start exactly one beat process (Procfile: beat).",
            )
        )
    if workers and waiting > TIMERS_BACKLOG:
        out.append(
            Alert(
                "warning",
                "The timers queue has a backlog",
                f"{waiting} tasks are waiting: check-backs and delayed "
                "deliveries run late.",
                "Look at the worker's log; give it more concurrency if it is "
                "busy (WORKER_CONCURRENCY).",
            )
        )
    return out


def _endpoint() -> list[Alert]:
    if not settings.GRPC_LISTEN:
        return []  # a console-only host: the nodes' endpoints are elsewhere
    try:
        check_grpc(PROBE_TIMEOUT_S)
        return []
    except (OSError, ValueError):
        return [
            Alert(
                "error",
                "The gRPC endpoint is down",
                f"Nothing answers on {settings.GRPC_LISTEN}: producers and "
                "consumers cannot connect, and check-backs cannot reach them.",
                "Start it (Procfile: grpc); clients reconnect by themselves.",
            )
        ]


def _disk_usage() -> tuple[float, float] | None:
    """(how full the store's disk is, the fill at which sends are refused):
    the node's own figures through its admin API with ``BROKER_ADMIN_URL``,
    else this host's."""
    if getattr(settings, "BROKER_ADMIN_URL", ""):
        from broker_core.errors import BrokerError
        from console.brokerlink import node_ops

        try:
            status = node_ops().store_status()
        except BrokerError:
            return None  # the endpoint and node checks say the node is down
        if status.get("disk_used") is None:
            return None
        return float(status["disk_used"]), float(status["disk_limit"])
    from broker_core.diskio import disk_usage

    opts = getattr(settings, "BROKER_STORE_OPTIONS", {}) or {}
    ratio = float(opts.get("disk_space_warning_ratio", 0.9))
    try:
        used, _free, total = disk_usage(settings.BROKER_STORE_DIR)
    except OSError:
        return None
    return (used, ratio) if total else None


def _disk() -> list[Alert]:
    usage = _disk_usage()
    if usage is None or usage[1] >= 1.0:
        return []
    used, ratio = usage
    if used >= ratio:
        return [
            Alert(
                "error",
                f"The store's disk is {used:.0%} full",
                f"Sends are refused above {ratio:.0%}; consumers still read.",
                "Free space or grow the volume; sends resume by themselves.",
            )
        ]
    if used >= ratio - 0.05:
        return [
            Alert(
                "warning",
                f"The store's disk is {used:.0%} full",
                f"Sends will be refused at {ratio:.0%}.",
                "Free space or grow the volume soon.",
            )
        ]
    return []


def _stuck() -> list[Alert]:
    """Stuck halves as counted by the last periodic check (never on a request)."""
    from console.transactions.services import published_stuck_counts

    try:
        s = published_stuck_counts(_redis())
    except redis.RedisError:
        return []  # _background already says Redis is down
    if not s or not s["by_checks"]:
        return []
    at = time.strftime("%H:%M:%S UTC", time.gmtime(s["at"]))
    return [
        Alert(
            "warning",
            f"{s['by_checks']} half messages are stuck",
            f"They were checked {s['checks']} times or more without an answer "
            "that resolves them: their producers are gone or say they do not "
            f"know (counted by the transaction check at {at}).",
            "Open Transactions (sorted by checks) and commit or roll them back "
            "with a reason.",
        )
    ]


def _local_store() -> bool:
    """Whether this console runs beside a store of its own: always on a single
    host; in a cluster only on a node's host (``BROKER_NODE``). A console that
    only manages a cluster has no local endpoint or disk to warn about."""
    return not getattr(settings, "BROKER_CLUSTER", "") or bool(
        getattr(settings, "BROKER_NODE", "")
    )


def _local_endpoint() -> list[Alert]:
    return _endpoint() if _local_store() else []


def _local_disk() -> list[Alert]:
    return _disk() if _local_store() else []


def _cluster() -> list[Alert]:
    from console.cluster.health import cluster_alerts

    return cluster_alerts(PROBE_TIMEOUT_S, Alert)


CHECKS = (_background, _local_endpoint, _local_disk, _stuck, _cluster)

_cache: tuple[float, list[Alert]] = (0.0, [])
_lock = threading.Lock()


def current_alerts() -> list[Alert]:
    """Every alert that holds now (cached for ``ALERTS_TTL`` seconds)."""
    global _cache
    ttl = float(getattr(settings, "HEALTH_BANNER_TTL", 5.0))
    now = time.monotonic()
    at, alerts = _cache
    if now - at < ttl:
        return alerts
    with _lock:
        if time.monotonic() - _cache[0] < ttl:
            return _cache[1]
        found: list[Alert] = []
        for check in CHECKS:
            try:
                found += check()
            except Exception:  # noqa: BLE001 - a broken check must not break pages
                log.exception("health banner check %s failed", check.__name__)
        _cache = (time.monotonic(), found)
        return found


def reset_cache() -> None:
    global _cache
    _cache = (0.0, [])


def alerts(request: Any) -> dict[str, Any]:
    """Context processor: the banner's alerts, for signed-in users."""
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {}
    return {"health_alerts": current_alerts()}
